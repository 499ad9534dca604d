/**
 * A holder's statements: claim tasks with a lease (SKIP LOCKED), keep the lease, and settle each
 * task with its fencing token (complete, fail, release), so a holder whose lease was taken over
 * can change nothing.
 */
import { FencedError, InvalidArgumentError } from '../core/errors.js';
import type { PipelinedTransaction, Queryable } from '../core/sql.js';
import { validateTenant } from '../core/tenant.js';
import { positive, positiveInteger } from '../core/validate.js';
import { isRetryableFailure } from '../core/resilience/classify.js';
import { sqlStateOf } from '../core/sqlstate.js';
import type { ClaimsContext } from './context.js';
import type { OneCompletion } from './statements.js';
import { decodeClaimedTask, oneTenant, taskScope, type ClaimedTask } from './task.js';

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

/** What `completeMany` did: the tasks completed, and those whose fence was raised. */
export interface Completed {
  completed: ClaimedTask[];
  refused: ClaimedTask[];
}

/** `Claims.claim`: up to `limit` due tasks of `queue`, leased to this worker. */
export async function claimTasks<P>(
  claims: ClaimsContext,
  queue: string,
  options: ClaimOptions,
): Promise<ClaimedTask<P>[]> {
  const limit = positiveInteger('limit', options.limit ?? 1);
  const leaseMs = positive('leaseMs', options.leaseMs ?? claims.leaseMs);
  if (options.tenant !== undefined) validateTenant(options.tenant);
  const now = claims.clock.now();
  const batch = {
    queue,
    now: new Date(now),
    limit,
    leaseUntil: new Date(now + leaseMs),
    workerId: claims.workerId,
  };
  const rows =
    options.tenant === undefined
      ? await claims.statements.claim(claims.sql, batch)
      : await claims.statements.claimTenant(claims.sql, { ...batch, tenant: options.tenant });
  return rows.map((row) => decodeClaimedTask<P>(row, claims.workerId));
}

/** `Claims.heartbeat`: renews the lease, or `FencedError` when it was taken over. */
export async function renewLease(claims: ClaimsContext, task: ClaimedTask, leaseMs: number): Promise<void> {
  const leaseUntil = claims.clock.now() + positive('leaseMs', leaseMs);
  const renewed = await claims.statements.heartbeat(claims.sql, { task, leaseUntil: new Date(leaseUntil) });
  if (renewed !== 1) throw new FencedError(taskScope(task), task.fence);
  task.leaseUntil = leaseUntil;
}

/** `Claims.guard`: checks the fence in `tx` and row-locks the task until `tx` ends. */
export async function guardTask(claims: ClaimsContext, tx: Queryable, task: ClaimedTask): Promise<void> {
  const leaseUntil = new Date(claims.clock.now() + claims.leaseMs);
  if ((await claims.statements.guard(tx, { task, leaseUntil })) !== 1) {
    throw new FencedError(taskScope(task), task.fence);
  }
}

/** `guardTask` for `run`'s own transaction: the fence checked and the row locked, nothing written. */
export async function lockTask(claims: ClaimsContext, tx: Queryable, task: ClaimedTask): Promise<void> {
  if ((await claims.statements.lock(tx, { task })) !== 1) throw new FencedError(taskScope(task), task.fence);
}

/** A lock sent ahead needs this much of the lease left by this clock (see `lockTaskAhead`). */
export const lockAheadMarginMs = 5_000;

/**
 * `lockTask` without waiting for its answer before the handler runs, for `run`'s own transaction
 * on a pipelined connection: the lock goes out with BEGIN, and the handler's first statement (or
 * the completion, with COMMIT) goes out behind it without a round trip of its own. The lock aborts
 * the transaction when the fence does not hold (`lockOrAbort`), so nothing behind it can commit;
 * the returned promise then rejects with `FencedError`.
 *
 * Only for a task whose lease has `lockAheadMarginMs` left by this worker's clock: only a claim
 * after the lease ended raises the fence, so such a task is not fenced (barring clocks that
 * disagree by more than the margin), and its handler starts at once instead of a round trip
 * later. A task closer to its lease end is locked with `lockTask` first, so its handler never runs
 * when the lease was lost. Measured in bench/claims.bench.ts (the worker one task at a time).
 */
export function lockTaskAhead(claims: ClaimsContext, tx: Queryable, task: ClaimedTask): Promise<void> {
  return claims.statements.lockOrAbort(tx, { task }).then(
    () => undefined,
    (error: unknown) => {
      throw sqlStateOf(error) === divisionByZero ? new FencedError(taskScope(task), task.fence) : error;
    },
  );
}

/** The SQLSTATE `lockOrAbort` raises when the fence does not hold. */
const divisionByZero = '22012';

/**
 * `Claims.completeIn`: completes the task on `db`, fenced. With `commit` (a transaction that can,
 * see `queryAndCommit`), the completion goes out with COMMIT in one round trip; the transaction is
 * over afterwards. Only for a transaction whose `guardTask` holds the task's row lock: the fence
 * cannot move under it, so the completion cannot be refused after the handler's writes committed.
 */
export async function completeTask(
  claims: ClaimsContext,
  db: Queryable,
  task: ClaimedTask,
  result: unknown,
  commit?: PipelinedTransaction,
): Promise<void> {
  const completion = completionOf(claims, task, result);
  const { complete } = claims.statements;
  const completed = commit ? await complete.withCommit(commit, completion) : await complete(db, completion);
  if (completed !== 1) throw new FencedError(taskScope(task), task.fence);
}

/** `Claims.completeMany`: a batch in one round trip; tasks whose fence was raised are refused. */
export async function completeTasks(
  claims: ClaimsContext,
  tasks: readonly ClaimedTask[],
  results: readonly unknown[] | undefined,
): Promise<Completed> {
  if (tasks.length === 0) return { completed: [], refused: [] };
  const completions = completionsOf(claims, tasks, results);
  // Tasks of one tenant (always, for a worker scoped to tenants) by a statement pinned to it.
  const tenant = oneTenant(tasks.map((t) => t.tenant));
  const rows =
    tenant === null
      ? await claims.statements.completeMany(claims.sql, completions)
      : await claims.statements.completeManyTenant(claims.sql, { ...completions, tenant });
  return split(
    tasks,
    rows.map((r) => r.id),
  );
}

/**
 * The claims worker's slot path: completes `task` inside its own transaction `tx` (whose lock
 * holds it) and claims the slot's next task of `queue` in the same statement; with `commit`, sent
 * with COMMIT, so a task costs its lock (with BEGIN) and this one round trip. The next task is
 * claimed when `tx` commits, or not at all.
 */
export async function completeAndClaimNext<P>(
  claims: ClaimsContext,
  tx: Queryable,
  task: ClaimedTask,
  result: unknown,
  queue: string,
  commit?: PipelinedTransaction,
): Promise<ClaimedTask<P> | undefined> {
  const completion = oneCompletionOf(claims, task, result, queue, claims.leaseMs);
  const { completeOneThenClaimOne } = claims.statements;
  const row = commit
    ? await completeOneThenClaimOne.withCommit(commit, completion)
    : await completeOneThenClaimOne(tx, completion);
  if (!row.completed) throw new FencedError(taskScope(task), task.fence);
  const [next] = JSON.parse(row.claimed) as Record<string, unknown>[];
  return next && decodeClaimedTask<P>(next, claims.workerId);
}

/** `Claims.completeAndClaim`: completes `done` and claims the next batch in one statement. */
export async function completeAndClaimTasks<P>(
  claims: ClaimsContext,
  done: readonly ClaimedTask[],
  queue: string,
  options: ClaimOptions & { results?: readonly unknown[] },
): Promise<Completed & { claimed: ClaimedTask<P>[] }> {
  const limit = positiveInteger('limit', options.limit ?? 1);
  const leaseMs = positive('leaseMs', options.leaseMs ?? claims.leaseMs);
  const tenant = options.tenant;
  if (tenant !== undefined) {
    validateTenant(tenant);
    if (done.some((t) => t.tenant !== tenant)) {
      throw new InvalidArgumentError(`completeAndClaim for tenant ${tenant} got a task of another tenant`);
    }
  }
  const decode = (json: string) =>
    (JSON.parse(json) as Record<string, unknown>[]).map((r) => decodeClaimedTask<P>(r, claims.workerId));
  // One task done and one claimed (a loop over one task at a time): the statement whose prepared
  // plan is kept (see `completeOneAndClaimOne`).
  if (tenant === undefined && done.length === 1 && limit === 1) {
    const task = done[0]!;
    const completion = oneCompletionOf(claims, task, options.results?.[0], queue, leaseMs);
    const row = await claims.statements.completeOneAndClaimOne(claims.sql, completion);
    return { ...split(done, row.completed ? [task.id] : []), claimed: decode(row.claimed) };
  }
  const completions = completionsOf(claims, done, options.results);
  const now = completions.now.getTime();
  const batch = {
    ...completions,
    queue,
    limit,
    leaseUntil: new Date(now + leaseMs),
    workerId: claims.workerId,
  };
  const row =
    tenant === undefined
      ? await claims.statements.completeAndClaim(claims.sql, batch)
      : await claims.statements.completeAndClaimTenant(claims.sql, { ...batch, tenant });
  return { ...split(done, row.completed), claimed: decode(row.claimed) };
}

/** `Claims.fail`: a retryable failure makes the task due after a backoff while attempts remain. */
export async function failTask(
  claims: ClaimsContext,
  task: ClaimedTask,
  error: unknown,
  options: FailOptions,
): Promise<FailResult> {
  const retryable = options.retryable ?? isRetryableFailure(error);
  const now = claims.clock.now();
  const delay = options.retryAfterMs ?? claims.backoff(task.attempts);
  const row = await claims.statements.fail(claims.sql, {
    task,
    retryAt: new Date(now + Math.max(0, delay)),
    error: describe(error),
    retryable,
    now: new Date(now),
    expiresAt: new Date(now + claims.retentionMs),
  });
  if (!row) throw new FencedError(taskScope(task), task.fence);
  return { state: row.state, retryAt: row.state === 'ready' ? now + Math.max(0, delay) : null };
}

/** `Claims.release`: gives the task back without counting the attempt. */
export async function releaseTask(claims: ClaimsContext, task: ClaimedTask): Promise<boolean> {
  return (await claims.statements.release(claims.sql, { task, now: new Date(claims.clock.now()) })) === 1;
}

/** Now, and when a task completed now expires (after the retention). */
function completedNow(claims: ClaimsContext): { now: Date; expiresAt: Date } {
  const now = claims.clock.now();
  return { now: new Date(now), expiresAt: new Date(now + claims.retentionMs) };
}

/** One task's completion now, with `result` (JSON text), kept for the retention. */
function completionOf(claims: ClaimsContext, task: ClaimedTask, result: unknown) {
  return { task, result: JSON.stringify(result ?? null), ...completedNow(claims) };
}

/** One task's completion and the claim of the next task of `queue`, leased for `leaseMs`. */
function oneCompletionOf(
  claims: ClaimsContext,
  task: ClaimedTask,
  result: unknown,
  queue: string,
  leaseMs: number,
): OneCompletion {
  const done = completionOf(claims, task, result);
  return { ...done, queue, leaseUntil: new Date(done.now.getTime() + leaseMs), workerId: claims.workerId };
}

/** The completions of `tasks` now, with `results` (null where none), kept for the retention. */
function completionsOf(claims: ClaimsContext, tasks: readonly ClaimedTask[], results?: readonly unknown[]) {
  return {
    tasks,
    results: tasks.map((_, i) => JSON.stringify(results?.[i] ?? null)),
    ...completedNow(claims),
  };
}

/** `tasks` split by the ids a completion accepted. */
function split(tasks: readonly ClaimedTask[], acceptedIds: readonly unknown[]): Completed {
  // Ids are unique across tenants (one sequence), so an id names one task of the batch.
  const accepted = new Set(acceptedIds.map(String));
  return {
    completed: tasks.filter((t) => accepted.has(t.id)),
    refused: tasks.filter((t) => !accepted.has(t.id)),
  };
}

function describe(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.slice(0, 2000);
}
