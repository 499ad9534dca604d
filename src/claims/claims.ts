import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import {
  ConcurrentChangeError,
  FencedError,
  InvalidArgumentError,
  isFenced,
  KeyReusedError,
} from '../core/errors.js';
import { fingerprint } from '../core/fingerprint.js';
import { validateKey, validateName } from '../core/keys.js';
import type { Queryable, Transaction } from '../core/sql.js';
import { deletedColumn, sweepInBatches, type SweepOptions, type SweepResult } from '../core/sweeper.js';
import { validateTenant } from '../core/tenant.js';
import { TableModule } from '../core/store.js';
import { createBackoff, type Backoff } from '../core/resilience/backoff.js';
import { positive, positiveInteger } from '../core/validate.js';
import { isRetryableFailure } from '../core/resilience/classify.js';
import { claimDefaults, type ClaimsOptions, type EnqueueResult, type EnqueueSpec } from './options.js';
import { renderClaimStatements, type ClaimStatements } from './statements.js';
import { decodeClaimedTask, decodeTask, taskScope, type ClaimedTask, type TaskRecord } from './task.js';

/** Options of one `claim` call. */
export interface ClaimOptions {
  /** How many tasks to claim at most. Default 1. */
  limit?: number;
  /** Overrides the instance's `leaseMs` for these tasks. */
  leaseMs?: number;
  /**
   * Only this tenant's tasks, in one statement pinned to it (a worker scoped to tenants; see
   * `work`'s `tenants`). Default: every tenant's tasks of the queue.
   */
  tenant?: string;
}

/** Options of `fail`. */
export interface FailOptions {
  /**
   * Whether a later attempt may succeed. Default: `isRetryableFailure(error)` (network errors and
   * timeouts, PostgreSQL serialization/deadlock/lock-timeout/connection errors, errors flagged
   * `retryable` such as a retryable `HttpStatusError`).
   * A non-retryable failure dead-letters the task at once.
   */
  retryable?: boolean;
  /** Overrides the computed backoff, in ms (e.g. a downstream's Retry-After). */
  retryAfterMs?: number;
}

/** Where `fail` left the task. */
export interface FailResult {
  state: 'ready' | 'dead';
  /** When a ready task is due again (epoch ms). */
  retryAt: number | null;
}

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
  private readonly maxAttempts: number;
  private readonly backoff: Backoff;
  private readonly retentionMs: number;

  constructor(options: ClaimsOptions<Client>) {
    super(options, renderClaimStatements);
    this.leaseMs = positive('leaseMs', options.leaseMs ?? claimDefaults.leaseMs);
    this.maxAttempts = positiveInteger('maxAttempts', options.maxAttempts ?? claimDefaults.maxAttempts);
    this.backoff = createBackoff(options.backoff, claimDefaults.backoff);
    this.retentionMs = positive('retentionMs', options.retentionMs ?? claimDefaults.retentionMs);
    this.workerId = options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
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
  async enqueueIn<P>(tx: Queryable, spec: EnqueueSpec<P>): Promise<EnqueueResult<P>> {
    const db = tx;
    validateName('tenant', spec.tenant);
    validateName('queue', spec.queue);
    validateKey(spec.key);
    const payload = JSON.stringify(spec.payload ?? null);
    const print = fingerprint(spec.payload ?? null);
    const maxAttempts = positiveInteger('maxAttempts', spec.maxAttempts ?? this.maxAttempts);
    const now = this.clock.now();
    // Bounded: the loop only repeats if the conflicting task was swept between the statements.
    for (let attempt = 0; attempt < 3; attempt++) {
      const inserted = await db.query(this.statements.enqueue, [
        spec.tenant,
        spec.queue,
        spec.key,
        print,
        payload,
        new Date(spec.runAt ?? now),
        maxAttempts,
        new Date(now),
      ]);
      if (inserted.rows[0]) return { task: decodeTask<P>(inserted.rows[0]), created: true };
      const existing = await db.query(this.statements.existing, [spec.tenant, spec.queue, spec.key]);
      const row = existing.rows[0];
      if (!row) continue;
      if (row.fingerprint !== print) {
        throw new KeyReusedError(taskScope(spec), row.fingerprint as string, print);
      }
      return { task: decodeTask<P>(row), created: false };
    }
    throw new ConcurrentChangeError('enqueue: the task kept disappearing between insert and read');
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
  async enqueueManyIn<P>(tx: Queryable, specs: readonly EnqueueSpec<P>[]): Promise<EnqueueResult<P>[]> {
    const db = tx;
    if (specs.length === 0) return [];
    const now = this.clock.now();
    const prepared = specs.map((spec) => {
      validateName('tenant', spec.tenant);
      validateName('queue', spec.queue);
      validateKey(spec.key);
      return {
        spec,
        payload: JSON.stringify(spec.payload ?? null),
        print: fingerprint(spec.payload ?? null),
        maxAttempts: positiveInteger('maxAttempts', spec.maxAttempts ?? this.maxAttempts),
      };
    });
    const column = <T>(pick: (p: (typeof prepared)[number]) => T) => prepared.map(pick);
    const tenant = oneTenant(specs.map((spec) => spec.tenant));
    const inserted = await db.query(this.statements.enqueueMany, [
      column((p) => p.spec.tenant),
      column((p) => p.spec.queue),
      column((p) => p.spec.key),
      column((p) => p.print),
      column((p) => p.payload),
      column((p) => new Date(p.spec.runAt ?? now)),
      column((p) => p.maxAttempts),
      new Date(now),
    ]);
    const identity = (tenant: unknown, queue: unknown, key: unknown) => JSON.stringify([tenant, queue, key]);
    const created = new Map(inserted.rows.map((r) => [identity(r.tenant_id, r.queue, r.dedupe_key), r]));
    const missing = prepared.filter((p) => !created.has(identity(p.spec.tenant, p.spec.queue, p.spec.key)));
    const existing = new Map<string, Record<string, unknown>>();
    if (missing.length > 0) {
      // Tasks of one tenant (the usual batch) are read by a statement pinned to it.
      const { rows } = await db.query(
        tenant === null ? this.statements.existingMany : this.statements.existingManyTenant,
        [
          tenant === null ? missing.map((p) => p.spec.tenant) : tenant,
          missing.map((p) => p.spec.queue),
          missing.map((p) => p.spec.key),
        ],
      );
      for (const r of rows) existing.set(identity(r.tenant_id, r.queue, r.dedupe_key), r);
    }
    const handedOut = new Set<string>();
    return prepared.map((p) => {
      const id = identity(p.spec.tenant, p.spec.queue, p.spec.key);
      const row = created.get(id) ?? existing.get(id);
      if (!row)
        throw new ConcurrentChangeError(`enqueueMany: task ${p.spec.key} vanished between insert and read`);
      if (row.fingerprint !== p.print) {
        throw new KeyReusedError(taskScope(p.spec), row.fingerprint as string, p.print);
      }
      const first = created.has(id) && !handedOut.has(id);
      handedOut.add(id);
      return { task: decodeTask<P>(row), created: first };
    });
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
  async claim<P = unknown>(queue: string, options: ClaimOptions = {}): Promise<ClaimedTask<P>[]> {
    const limit = positiveInteger('limit', options.limit ?? 1);
    const leaseMs = positive('leaseMs', options.leaseMs ?? this.leaseMs);
    if (options.tenant !== undefined) validateTenant(options.tenant);
    const now = this.clock.now();
    const params = [queue, new Date(now), limit, new Date(now + leaseMs), this.workerId];
    const claim = options.tenant === undefined ? 'claim' : 'claimTenant';
    const { rows } = await this.sql.query(
      this.statements[claim],
      options.tenant === undefined ? params : [...params, options.tenant],
      this.statements.names[claim],
    );
    return rows.map((row) => this.held<P>(row));
  }

  private held<P>(row: Record<string, unknown>): ClaimedTask<P> {
    return decodeClaimedTask<P>(row, this.workerId);
  }

  /**
   * Renews the lease to now + `leaseMs`. Throws `FencedError` when the task was taken over (or
   * finished by someone else): stop working on it.
   */
  async heartbeat(task: ClaimedTask, options: { leaseMs?: number } = {}): Promise<void> {
    const leaseUntil = this.clock.now() + positive('leaseMs', options.leaseMs ?? this.leaseMs);
    const { rowCount } = await this.sql.query(
      this.statements.heartbeat,
      [task.id, task.fence, new Date(leaseUntil), task.tenant],
      this.statements.names.heartbeat,
    );
    if (rowCount !== 1) throw new FencedError(taskScope(task), task.fence);
    task.leaseUntil = leaseUntil;
  }

  /**
   * Inside the caller's transaction: checks the fence and row-locks the task until that
   * transaction ends, so no other worker can take it over meanwhile. Call it first in any
   * transaction whose writes must come only from the current holder. Throws `FencedError`
   * (roll back) when the lease was taken over.
   */
  async guard(tx: Queryable, task: ClaimedTask): Promise<void> {
    const leaseUntil = this.clock.now() + this.leaseMs;
    const { rowCount } = await tx.query(
      this.statements.guard,
      [task.id, task.fence, new Date(leaseUntil), task.tenant],
      this.statements.names.guard,
    );
    if (rowCount !== 1) throw new FencedError(taskScope(task), task.fence);
  }

  /**
   * Completes the task inside the caller's transaction, so its business writes (an outbox event,
   * say) commit with the completion or not at all. Throws `FencedError` when this holder's lease
   * was taken over or the task already finished: the caller must roll back.
   */
  async completeIn(tx: Queryable, task: ClaimedTask, result: unknown = null): Promise<void> {
    const now = this.clock.now();
    const { rowCount } = await tx.query(
      this.statements.complete,
      [
        task.id,
        task.fence,
        JSON.stringify(result ?? null),
        new Date(now),
        new Date(now + this.retentionMs),
        task.tenant,
      ],
      this.statements.names.complete,
    );
    if (rowCount !== 1) throw new FencedError(taskScope(task), task.fence);
  }

  /** Completes the task in its own statement. Throws `FencedError` like `completeIn`. */
  complete(task: ClaimedTask, result: unknown = null): Promise<void> {
    return this.completeIn(this.sql, task, result);
  }

  /**
   * Completes a batch in one round trip. Tasks whose fence was raised are not completed and are
   * returned in `refused`.
   */
  async completeMany(
    tasks: readonly ClaimedTask[],
    results?: readonly unknown[],
  ): Promise<{ completed: ClaimedTask[]; refused: ClaimedTask[] }> {
    if (tasks.length === 0) return { completed: [], refused: [] };
    const now = this.clock.now();
    // Tasks of one tenant (always, for a worker scoped to tenants) by a statement pinned to it.
    const tenant = oneTenant(tasks.map((t) => t.tenant));
    const statement = tenant === null ? 'completeMany' : 'completeManyTenant';
    const { rows } = await this.sql.query<{ id: string }>(
      this.statements[statement],
      [
        tasks.map((t) => t.id),
        tasks.map((t) => t.fence),
        tasks.map((_, i) => JSON.stringify(results?.[i] ?? null)),
        new Date(now),
        new Date(now + this.retentionMs),
        tenant ?? tasks.map((t) => t.tenant),
      ],
      this.statements.names[statement],
    );
    // Ids are unique across tenants (one sequence), so an id names one task of the batch.
    const accepted = new Set(rows.map((r) => String(r.id)));
    return {
      completed: tasks.filter((t) => accepted.has(t.id)),
      refused: tasks.filter((t) => !accepted.has(t.id)),
    };
  }

  /**
   * Completes `done` (fenced, as `completeMany`) and claims up to `limit` more tasks of `queue`,
   * in one statement: a worker that processes batches back to back pays one round trip and one
   * commit per batch instead of two. Tasks whose fence was raised are returned in `refused`.
   * With `tenant`, claims that tenant's tasks only, and every task in `done` must be that
   * tenant's (one statement pinned to it).
   */
  async completeAndClaim<P = unknown>(
    done: readonly ClaimedTask[],
    queue: string,
    options: ClaimOptions & { results?: readonly unknown[] } = {},
  ): Promise<{ completed: ClaimedTask[]; refused: ClaimedTask[]; claimed: ClaimedTask<P>[] }> {
    const limit = positiveInteger('limit', options.limit ?? 1);
    const leaseMs = positive('leaseMs', options.leaseMs ?? this.leaseMs);
    const tenant = options.tenant;
    if (tenant !== undefined) {
      validateTenant(tenant);
      if (done.some((t) => t.tenant !== tenant)) {
        throw new InvalidArgumentError(`completeAndClaim for tenant ${tenant} got a task of another tenant`);
      }
    }
    const now = this.clock.now();
    const statement = tenant === undefined ? 'completeAndClaim' : 'completeAndClaimTenant';
    const { rows } = await this.sql.query<{ completed: string[]; claimed: string }>(
      this.statements[statement],
      [
        done.map((t) => t.id),
        done.map((t) => t.fence),
        done.map((_, i) => JSON.stringify(options.results?.[i] ?? null)),
        new Date(now),
        new Date(now + this.retentionMs),
        queue,
        limit,
        new Date(now + leaseMs),
        this.workerId,
        tenant ?? done.map((t) => t.tenant),
      ],
      this.statements.names[statement],
    );
    const row = rows[0]!;
    const accepted = new Set(row.completed.map(String));
    const claimed = (JSON.parse(row.claimed) as Record<string, unknown>[]).map((r) => this.held<P>(r));
    return {
      completed: done.filter((t) => accepted.has(t.id)),
      refused: done.filter((t) => !accepted.has(t.id)),
      claimed,
    };
  }

  /**
   * Records a failure with the fence: a retryable one makes the task due again after a backoff
   * while attempts remain; otherwise it is dead-lettered. Throws `FencedError` when the lease was
   * taken over (the new holder's attempt is the one that counts).
   */
  async fail(task: ClaimedTask, error: unknown, options: FailOptions = {}): Promise<FailResult> {
    const retryable = options.retryable ?? isRetryableFailure(error);
    const now = this.clock.now();
    const delay = options.retryAfterMs ?? this.backoff(task.attempts);
    const { rows } = await this.sql.query<{ state: 'ready' | 'dead'; visible_at: unknown }>(
      this.statements.fail,
      [
        task.id,
        task.fence,
        new Date(now + Math.max(0, delay)),
        describe(error),
        retryable,
        new Date(now),
        new Date(now + this.retentionMs),
        task.tenant,
      ],
    );
    const row = rows[0];
    if (!row) throw new FencedError(taskScope(task), task.fence);
    return { state: row.state, retryAt: row.state === 'ready' ? now + Math.max(0, delay) : null };
  }

  /** Gives the task back at once without counting the attempt (a worker shutting down). */
  async release(task: ClaimedTask): Promise<boolean> {
    const { rowCount } = await this.sql.query(this.statements.release, [
      task.id,
      task.fence,
      new Date(this.clock.now()),
      task.tenant,
    ]);
    return rowCount === 1;
  }

  /**
   * Runs `handler` for a claimed task in one transaction that first takes the fence (`guard`),
   * then runs the handler's writes, then completes the task: all commit together, or nothing
   * does. While the transaction is open the task's row is locked, so no other worker takes it
   * over even if the lease runs out. The transaction (a pooled connection, the row lock) stays
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
    let handlerError: { error: unknown } | undefined;
    try {
      const value = await this.sql.transaction((tx) =>
        this.runIn(tx, task, async (tx, task) => {
          try {
            return await handler(tx, task);
          } catch (error) {
            handlerError = { error };
            throw error;
          }
        }),
      );
      return { state: 'completed', value };
    } catch (error) {
      if (isFenced(error) && !handlerError) return { state: 'fenced', error };
      if (!handlerError) throw error;
      try {
        const failed = await this.fail(task, handlerError.error);
        return { state: failed.state, error: handlerError.error, retryAt: failed.retryAt };
      } catch (failError) {
        if (isFenced(failError)) return { state: 'fenced', error: failError };
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
    const value = await handler(tx, task);
    await this.completeIn(tx, task, value);
    return value;
  }

  /**
   * Reads one task, or null: by its `id` (give its `tenant` for a primary-key lookup; without it
   * the task is looked for in every tenant, a scan of the key's index: for tools, not hot paths),
   * or by its dedupe key (`tenant`, `queue`, `key`).
   *
   * @example
   * const task = await claims.get({ tenant: 'acme', queue: 'emails', key: 'welcome:42' });
   */
  async get<P = unknown>(
    ref: { id: string; tenant?: string } | { tenant: string; queue: string; key: string },
  ): Promise<TaskRecord<P> | null> {
    if (ref.tenant !== undefined) validateTenant(ref.tenant);
    let rows;
    if ('id' in ref) {
      ({ rows } =
        ref.tenant === undefined
          ? await this.sql.query(this.statements.byId, [ref.id])
          : await this.sql.query(this.statements.byIdTenant, [ref.id, ref.tenant]));
    } else {
      ({ rows } = await this.sql.query(this.statements.byKey, [ref.tenant, ref.queue, ref.key]));
    }
    return rows[0] ? decodeTask<P>(rows[0]) : null;
  }

  /** The dead letters of a queue (of every tenant, or of one), oldest first. */
  async listDead<P = unknown>(options: {
    queue: string;
    limit?: number;
    tenant?: string;
  }): Promise<TaskRecord<P>[]> {
    if (options.tenant !== undefined) validateTenant(options.tenant);
    const { rows } = await this.sql.query(this.statements.dead, [
      options.queue,
      options.limit ?? 100,
      options.tenant ?? null,
    ]);
    return rows.map((row) => decodeTask<P>(row));
  }

  /**
   * Puts a dead task back on its queue with fresh attempts. Returns null if it is not dead. Give
   * its `tenant` for a primary-key lookup (as for `get`).
   */
  async redrive<P = unknown>(
    id: string,
    options: { runAt?: number; tenant?: string } = {},
  ): Promise<TaskRecord<P> | null> {
    if (options.tenant !== undefined) validateTenant(options.tenant);
    const params = [id, new Date(options.runAt ?? this.clock.now())];
    const { rows } =
      options.tenant === undefined
        ? await this.sql.query(this.statements.redrive, params)
        : await this.sql.query(this.statements.redriveTenant, [...params, options.tenant]);
    return rows[0] ? decodeTask<P>(rows[0]) : null;
  }

  /**
   * Deletes finished tasks past their retention with their dedupe keys, in batches that skip
   * locked rows (see `SweepOptions`).
   */
  async sweep(options: SweepOptions = {}): Promise<SweepResult> {
    return sweepInBatches(
      this.sql,
      this.clock,
      [
        {
          statement: this.statements.sweep,
          tenantStatement: this.statements.sweepTenant,
          cutoff: () => new Date(this.clock.now()),
          rowsOf: deletedColumn,
        },
      ],
      options,
    );
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

/** The one tenant all of `tenants` share, or null when they differ. */
function oneTenant(tenants: readonly string[]): string | null {
  return tenants.every((t) => t === tenants[0]) ? (tenants[0] ?? null) : null;
}

function describe(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.slice(0, 2000);
}
