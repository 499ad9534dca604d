import { hostname } from 'node:os';
import { runInCause } from '../observability/caused-span.js';
import { randomBytes } from 'node:crypto';
import { FencedError, isFenced } from '../core/errors.js';
import {
  canCommitWith,
  canDeferBegin,
  transactionOnFirstUse,
  type DeferredTransaction,
  type PipelinedTransaction,
  type Queryable,
  type Transaction,
} from '../core/sql.js';
import type { SweepOptions, SweepResult } from '../core/sweeper.js';
import { TableModule } from '../core/store.js';
import { createBackoff } from '../core/resilience/backoff.js';
import { positive, positiveInteger } from '../core/validate.js';
import { readTask, listDeadTasks, redriveTask, sweepTasks } from './admin.js';
import type { ClaimsContext } from './context.js';
import { enqueueTask, enqueueTasks } from './enqueue.js';
import {
  claimTasks,
  completeAndClaimNext,
  completeAndClaimTasks,
  completeTask,
  completeTasks,
  failTask,
  guardTask,
  lockAheadMarginMs,
  lockTask,
  lockTaskAhead,
  releaseTask,
  renewLease,
  type ClaimOptions,
  type FailOptions,
  type FailResult,
} from './leases.js';
import { claimDefaults, type ClaimsOptions, type EnqueueResult, type EnqueueSpec } from './options.js';
import { renderClaimStatements, type ClaimStatements } from './statements.js';
import type { ClaimedTask, TaskRecord } from './task.js';

/** What `run` did with a task. */
export type RunOutcome<R> =
  | { state: 'completed'; value: R }
  | { state: 'ready' | 'dead'; error: unknown; retryAt: number | null }
  | { state: 'fenced'; error: FencedError };

/**
 * Claims with leases and fencing tokens, for polling workers and background agents.
 *
 * @example
 * const claims = createClaims({ sql: fromPg(pool) });
 * await claims.enqueue({ tenant: 'acme', queue: 'notify', key: `order-${id}`, payload: { id } });
 * for (const task of await claims.claim('notify', { limit: 10 })) {
 *   await claims.run(task, async (tx) => {
 *     await outbox.add(tx, { topic: 'notifications', payload: { order: task.payload.id } });
 *   });
 * }
 */
export class Claims<Client = unknown> extends TableModule<Client, ClaimStatements> {
  readonly workerId: string;
  readonly leaseMs: number;
  /** What the operations in enqueue.ts, leases.ts and admin.ts read. */
  private readonly context: ClaimsContext;

  constructor(options: ClaimsOptions<Client>) {
    super(options, renderClaimStatements);
    this.leaseMs = positive('leaseMs', options.leaseMs ?? claimDefaults.leaseMs);
    const maxAttempts = positiveInteger('maxAttempts', options.maxAttempts ?? claimDefaults.maxAttempts);
    const backoff = createBackoff(options.backoff, claimDefaults.backoff);
    const retentionMs = positive('retentionMs', options.retentionMs ?? claimDefaults.retentionMs);
    this.workerId = options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.context = {
      sql: this.sql,
      clock: this.clock,
      statements: this.statements,
      workerId: this.workerId,
      leaseMs: this.leaseMs,
      maxAttempts,
      backoff,
      retentionMs,
    };
  }

  /**
   * Enqueues a task once per (tenant, queue, key), in its own statement. The same key returns the
   * existing task, in whatever state it is, with `created: false`; the same key with another
   * payload throws `KeyReusedError`. To enqueue atomically with your own writes, use `enqueueIn`.
   *
   * @example
   * const { task, created } = await claims.enqueue({
   *   tenant: 'acme',
   *   queue: 'emails',
   *   key: `welcome:${userId}`,
   *   payload: { userId },
   * });
   */
  enqueue<P>(spec: EnqueueSpec<P>): Promise<EnqueueResult<P>> {
    return this.enqueueIn(this.sql, spec);
  }

  /**
   * `enqueue` inside the caller's transaction (`tx` first, as in every `…In` method): the task
   * exists only if the caller's writes commit.
   *
   * @example
   * await sql.transaction(async (tx) => {
   *   await tx.query('INSERT INTO orders (id) VALUES ($1)', [orderId]);
   *   await claims.enqueueIn(tx, { tenant: 'acme', queue: 'emails', key: `order:${orderId}`, payload: { orderId } });
   * });
   */
  enqueueIn<P>(tx: Queryable, spec: EnqueueSpec<P>): Promise<EnqueueResult<P>> {
    return enqueueTask(tx, this.context, spec);
  }

  /**
   * `enqueue` for many tasks in one round trip (plus one read when some keys already exist).
   * Results come back in the order of `specs`. A key repeated inside `specs` yields one task.
   * Throws `KeyReusedError` if a key exists with another payload (the tasks before it in the
   * statement are enqueued; use `enqueueManyIn` and roll back to enqueue none).
   */
  enqueueMany<P>(specs: readonly EnqueueSpec<P>[]): Promise<EnqueueResult<P>[]> {
    return this.enqueueManyIn(this.sql, specs);
  }

  /** `enqueueMany` inside the caller's transaction: all the tasks commit with the caller's writes, or none. */
  enqueueManyIn<P>(tx: Queryable, specs: readonly EnqueueSpec<P>[]): Promise<EnqueueResult<P>[]> {
    return enqueueTasks(tx, this.context, specs);
  }

  /**
   * Claims up to `limit` due tasks of `queue` (and tasks whose holder's lease lapsed), in one
   * statement with `FOR UPDATE SKIP LOCKED`: concurrent workers never wait for each other and
   * never get the same task while its lease holds. Each claim raises the task's fence.
   *
   * @example
   * for (const task of await claims.claim<{ orderId: string }>('receipts', { limit: 10 })) {
   *   await claims.run(task, (tx) => sendReceipt(tx, task.payload.orderId, task.downstreamKey));
   * }
   */
  claim<P = unknown>(queue: string, options: ClaimOptions = {}): Promise<ClaimedTask<P>[]> {
    return claimTasks(this.context, queue, options);
  }

  /**
   * Renews the lease to now + `leaseMs`. Throws `FencedError` when the task was taken over (or
   * finished by someone else): stop working on it.
   */
  heartbeat(task: ClaimedTask, options: { leaseMs?: number } = {}): Promise<void> {
    return renewLease(this.context, task, options.leaseMs ?? this.leaseMs);
  }

  /**
   * Inside the caller's transaction: checks the fence and row-locks the task until that
   * transaction ends, so no other worker can take it over meanwhile. Call it first in any
   * transaction whose writes must come only from the current holder. Throws `FencedError`
   * (roll back) when the lease was taken over.
   */
  guard(tx: Queryable, task: ClaimedTask): Promise<void> {
    return guardTask(this.context, tx, task);
  }

  /**
   * Completes the task inside the caller's transaction, so its business writes (an outbox event,
   * say) commit with the completion or not at all. Throws `FencedError` when this holder's lease
   * was taken over or the task already finished: the caller must roll back.
   */
  completeIn(tx: Queryable, task: ClaimedTask, result: unknown = null): Promise<void> {
    return completeTask(this.context, tx, task, result);
  }

  /** Completes the task in its own statement. Throws `FencedError` like `completeIn`. */
  complete(task: ClaimedTask, result: unknown = null): Promise<void> {
    return this.completeIn(this.sql, task, result);
  }

  /**
   * Completes a batch in one round trip. Tasks whose fence was raised are not completed and are
   * returned in `refused`.
   */
  completeMany(
    tasks: readonly ClaimedTask[],
    results?: readonly unknown[],
  ): Promise<{ completed: ClaimedTask[]; refused: ClaimedTask[] }> {
    return completeTasks(this.context, tasks, results);
  }

  /**
   * Completes `done` (fenced, as `completeMany`) and claims up to `limit` more tasks of `queue`,
   * in one statement: a worker that processes batches back to back pays one round trip and one
   * commit per batch instead of two. Tasks whose fence was raised are returned in `refused`.
   * With `tenant`, claims that tenant's tasks only, and every task in `done` must be that
   * tenant's (one statement pinned to it).
   */
  completeAndClaim<P = unknown>(
    done: readonly ClaimedTask[],
    queue: string,
    options: ClaimOptions & { results?: readonly unknown[] } = {},
  ): Promise<{ completed: ClaimedTask[]; refused: ClaimedTask[]; claimed: ClaimedTask<P>[] }> {
    return completeAndClaimTasks(this.context, done, queue, options);
  }

  /**
   * Records a failure with the fence: a retryable one makes the task due again after a backoff
   * while attempts remain; otherwise it is dead-lettered. Throws `FencedError` when the lease was
   * taken over (the new holder's attempt is the one that counts).
   */
  fail(task: ClaimedTask, error: unknown, options: FailOptions = {}): Promise<FailResult> {
    return failTask(this.context, task, error, options);
  }

  /** Gives the task back at once without counting the attempt (a worker shutting down). */
  release(task: ClaimedTask): Promise<boolean> {
    return releaseTask(this.context, task);
  }

  /**
   * Runs `handler` for a claimed task in one transaction that first takes the fence (`guard`),
   * then runs the handler's writes, then completes the task: all commit together, or nothing
   * does. While the transaction is open the task's row is locked, so no other worker takes it
   * over even if the lease runs out. On a node-postgres pool in pipeline mode the transaction
   * begins at the handler's first use of `tx` (a statement, or reading `tx.client`), or when 5 s
   * of the lease are left if the handler is still running then: a handler that never touches the
   * database costs one statement, the fenced completion. The transaction (a pooled connection, the row lock) stays
   * open while the handler runs: keep it to database work. Work that leaves the database (an
   * HTTP call, an LLM request) runs outside any transaction with `createKeepAlive({ claims, task })` and a
   * fenced `complete(task, result)`, sending `task.downstreamKey` as its idempotency key so a retry after a
   * crash sends the same one.
   *
   * Never throws for the handler's failure: it is recorded with `fail` and returned. A lost
   * lease is returned as `{ state: 'fenced' }`; database errors while recording are thrown.
   *
   * @example
   * const outcome = await claims.run(task, async (tx) => {
   *   await outbox.add(tx, { topic: 'emails', key: task.payload.user, type: 'email.requested', payload: task.payload });
   * });
   * if (outcome.state === 'dead') alert(task.id, outcome.error);
   */
  async run<P, R>(
    task: ClaimedTask<P>,
    handler: (tx: Transaction<Client>, task: ClaimedTask<P>) => Promise<R>,
  ): Promise<RunOutcome<R>> {
    return (
      await this.runThen(task, handler, (tx, value, commit) =>
        completeTask(this.context, tx, task, value, commit),
      )
    ).outcome;
  }

  /**
   * `run`, whose completion also claims the next task of `queue` in the same statement (sent with
   * COMMIT where the connection can): a loop that runs one task at a time (a claims worker's slot)
   * pays one lock and one completion per task, and no claim of its own. `next` is the task claimed
   * for the caller to run, claimed only if this one completed; undefined when the queue had none
   * due. The next task may be any tenant's (the claim is not pinned to one).
   *
   * @example
   * let task = (await claims.claim('emails'))[0];
   * while (task) ({ next: task } = await claims.runAndClaimNext(task, sendEmail, 'emails'));
   */
  async runAndClaimNext<P, R>(
    task: ClaimedTask<P>,
    handler: (tx: Transaction<Client>, task: ClaimedTask<P>) => Promise<R>,
    queue: string,
  ): Promise<{ outcome: RunOutcome<R>; next?: ClaimedTask<P> | undefined }> {
    return this.runThen(task, handler, (tx, value, commit) =>
      completeAndClaimNext<P>(this.context, tx, task, value, queue, commit),
    );
  }

  /**
   * Fence, handler and `finish` (the completion) in one transaction of idem's own, so `finish`
   * may go out with COMMIT (`commit`, on a pipelined connection); a handler's failure is recorded
   * with `fail`, a lost lease returned as `fenced`.
   */
  private async runThen<P, R, Next>(
    task: ClaimedTask<P>,
    handler: (tx: Transaction<Client>, task: ClaimedTask<P>) => Promise<R>,
    finish: (tx: Transaction<Client>, value: R, commit: PipelinedTransaction | undefined) => Promise<Next>,
  ): Promise<{ outcome: RunOutcome<R>; next?: Next }> {
    let handlerError: { error: unknown } | undefined;
    // Set when the lock went out ahead of the handler (`lockTaskAhead`): its outcome decides.
    let lockedAhead: Promise<unknown> | undefined;
    const lockAhead = (tx: Queryable) => {
      lockedAhead = lockTaskAhead(this.context, tx, task).then(
        () => undefined,
        (error: unknown) => error,
      );
    };
    const leaseLeftMs = task.leaseUntil - this.clock.now();
    const inTransaction = async (
      tx: Transaction<Client>,
      deferred?: DeferredTransaction<Client>,
    ): Promise<[R, Next]> => {
      // In idem's own transaction, which ends with the completion, the lock is enough (no lease
      // renewal: see the `lock` statement).
      const commit = canCommitWith(tx) ? tx : undefined;
      let lockTimer: ReturnType<typeof setTimeout> | undefined;
      if (deferred && !deferred.begun) {
        // BEGIN and the lock go out with the handler's first statement; a handler that writes
        // nothing takes no lock, and its completion is one statement. One still running when
        // `lockAheadMarginMs` of its lease is left takes the lock then, so no claim takes the
        // task over from under it whatever it outlives.
        lockTimer = setTimeout(() => deferred.begin(), leaseLeftMs - lockAheadMarginMs);
        lockTimer.unref?.();
      } else if (commit && leaseLeftMs >= lockAheadMarginMs) {
        lockAhead(tx);
      } else {
        await lockTask(this.context, tx, task);
      }
      let value: R;
      try {
        value = await this.inCause(task, () => handler(tx, task));
      } catch (error) {
        handlerError = { error };
        throw error;
      } finally {
        clearTimeout(lockTimer);
      }
      const next = await finish(tx, value, commit);
      // Answered before the completion was (one connection, in order); a failed lock made the
      // completion fail too, so this only reports why.
      await rethrow(lockedAhead);
      return [value, next];
    };
    try {
      const { sql } = this;
      const [value, next] =
        leaseLeftMs >= lockAheadMarginMs && canDeferBegin(sql)
          ? await sql[transactionOnFirstUse]((tx) => inTransaction(tx, tx), lockAhead)
          : await sql.transaction((tx) => inTransaction(tx));
      return { outcome: { state: 'completed', value }, next };
    } catch (error) {
      // A lock sent ahead that failed aborted the transaction: whatever the handler or the
      // completion met after it (25P02), the task was fenced and nothing committed.
      const lockError = await lockedAhead;
      if (isFenced(lockError)) return { outcome: { state: 'fenced', error: lockError } };
      if (lockError !== undefined) throw lockError;
      if (isFenced(error) && !handlerError) return { outcome: { state: 'fenced', error } };
      if (!handlerError) throw error;
      try {
        const failed = await this.fail(task, handlerError.error);
        return { outcome: { state: failed.state, error: handlerError.error, retryAt: failed.retryAt } };
      } catch (failError) {
        if (isFenced(failError)) return { outcome: { state: 'fenced', error: failError } };
        throw failError;
      }
    }
  }

  /**
   * `run` inside the caller's transaction: takes the fence (`guard`), runs `handler`, completes
   * the task with its result; all commit with the caller's writes, or nothing does. Unlike `run`,
   * a failure is not recorded: the handler's error (or `FencedError` for a lost lease) is thrown,
   * and the caller rolls back, then calls `fail(task, error)` when the error came from the handler.
   *
   * @example
   * await sql.transaction(async (tx) => {
   *   await claims.runIn(tx, task, async (tx) => {
   *     await outbox.add(tx, { topic: 'emails', key: task.payload.user, type: 'email', payload: task.payload });
   *   });
   * });
   */
  async runIn<P, R, TxClient>(
    tx: Transaction<TxClient>,
    task: ClaimedTask<P>,
    handler: (tx: Transaction<TxClient>, task: ClaimedTask<P>) => Promise<R>,
  ): Promise<R> {
    await this.guard(tx, task);
    const value = await this.inCause(task, () => handler(tx, task));
    await this.completeIn(tx, task, value);
    return value;
  }

  /** Runs `fn` on behalf of the intent that enqueued `task`, in a span of that intent's trace. */
  private inCause<R>(task: ClaimedTask, fn: () => Promise<R>): Promise<R> {
    const cause = { intent: task.intent, traceparent: task.traceparent };
    return runInCause('idem.claims.task', cause, { 'idem.queue': task.queue, 'idem.task': task.id }, fn);
  }

  /**
   * Reads one task, or null: by its `id` (give its `tenant` for a primary-key lookup; without it
   * the task is looked for in every tenant, a scan of the key's index: for tools, not hot paths),
   * or by its dedupe key (`tenant`, `queue`, `key`).
   *
   * @example
   * const task = await claims.get({ tenant: 'acme', queue: 'emails', key: 'welcome:42' });
   */
  get<P = unknown>(
    ref: { id: string; tenant?: string } | { tenant: string; queue: string; key: string },
  ): Promise<TaskRecord<P> | null> {
    return readTask(this.context, ref);
  }

  /** The dead letters of a queue (of every tenant, or of one), oldest first. */
  listDead<P = unknown>(options: {
    queue: string;
    limit?: number;
    tenant?: string;
  }): Promise<TaskRecord<P>[]> {
    return listDeadTasks(this.context, options);
  }

  /**
   * Puts a dead task back on its queue with fresh attempts. Returns null if it is not dead. Give
   * its `tenant` for a primary-key lookup (as for `get`).
   */
  redrive<P = unknown>(
    id: string,
    options: { runAt?: number; tenant?: string } = {},
  ): Promise<TaskRecord<P> | null> {
    return redriveTask(this.context, id, options);
  }

  /**
   * Deletes finished tasks past their retention with their dedupe keys, in batches that skip
   * locked rows (see `SweepOptions`).
   */
  sweep(options: SweepOptions = {}): Promise<SweepResult> {
    return sweepTasks(this.context, options);
  }
}

/**
 * Creates a `Claims` for one database and schema. See `ClaimsOptions` for the defaults.
 *
 * @example
 * const claims = createClaims({ sql: fromPg(pool), leaseMs: 30_000, maxAttempts: 5 });
 */
export function createClaims<Client>(options: ClaimsOptions<Client>): Claims<Client> {
  return new Claims(options);
}

/** Throws the error `settled` resolves with (a promise that resolves with its error, or undefined). */
async function rethrow(settled: Promise<unknown> | undefined): Promise<void> {
  const error = await settled;
  if (error !== undefined) throw error;
}
