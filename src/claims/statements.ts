import { quoteSchema } from '../core/schema-name.js';
import type { Row } from '../core/sql.js';
import {
  affectedRows,
  allRows,
  defineStatement,
  firstRow,
  preparedStatement,
  type StatementSpec,
} from '../core/statement.js';
import type { TaskRecord } from './task.js';
import { renderEnqueueStatements } from './enqueue-statements.js';
import { deletedColumn, sweepStatement as sweepBatch, tenantSweepStatement } from '../core/sweeper.js';

export { taskColumns, type KeyedTaskRow, type NewTask, type TaskKey, type TaskRow } from './task-columns.js';
import { claimCtes, completeAndClaim, completeOneAndClaimOne, prefixed } from './claim-sql.js';
import { taskColumns, type KeyedTaskRow, type TaskKey, type TaskRow } from './task-columns.js';

/** A claimed task as its fenced statements name it: (tenant, id) and the holder's fence. */
export type HeldTask = Pick<TaskRecord, 'id' | 'fence' | 'tenant'>;

/** What a claim takes: up to `limit` due tasks of `queue`, leased to `workerId` until `leaseUntil`. */
export interface ClaimBatch {
  queue: string;
  now: Date;
  limit: number;
  leaseUntil: Date;
  workerId: string;
}

/** Completions of a batch: `results` (JSON texts) one per task, kept until `expiresAt`. */
export interface Completions {
  tasks: readonly HeldTask[];
  results: readonly string[];
  now: Date;
  expiresAt: Date;
}

/** Pinned to one tenant: every task of the statement is `tenant`'s. */
interface Pinned {
  tenant: string;
}

/** A statement of the hot path, prepared under its old key (`idem_task_<key>_<hash>`). */
const prepared = <Input, R extends Row, Output>(
  key: string,
  spec: Omit<StatementSpec<Input, R, Output>, 'name'>,
) => preparedStatement('task', key, spec);

/**
 * Every statement of the claims engine, rendered once per schema. The hot path is two round
 * trips per batch: `claim` (one statement for N tasks) and `complete` / `completeMany`.
 *
 * Tasks are keyed by (tenant_id, id). Statements about one task name its tenant; statements about
 * a batch come in two forms, for tasks of one tenant (`…Tenant`, pinned to it: what a database
 * distributed by tenant routes to one shard) and across tenants (by (tenant, id) pairs). The claim
 * is across every tenant of a queue, or pinned to one (`claimTenant`, a worker scoped to tenants).
 *
 * The hot path's statements are named prepared statements (node-postgres): parsed and planned
 * once per connection. Planning the claim statement took 1.07 ms against 0.95 ms of execution
 * (EXPLAIN ANALYZE, 24k tasks), so on the hot path a prepared plan saves about half the server's
 * work per claim. The others are sent unnamed.
 */
export function renderClaimStatements(schema: string) {
  const s = quoteSchema(schema);
  const claimParams = (b: ClaimBatch) => [b.queue, b.now, b.limit, b.leaseUntil, b.workerId];
  // $1 ids, $2 fences, $3 results, $4 now, $5 expiry: the completions' part of each statement.
  const completions = (c: Completions) => [
    c.tasks.map((t) => t.id),
    c.tasks.map((t) => t.fence),
    c.results,
    c.now,
    c.expiresAt,
  ];
  // $6 queue, $7 limit, $8 lease end, $9 worker id after the completions.
  const completeAndClaimParams = (c: Completions & ClaimBatch) => [
    ...completions(c),
    c.queue,
    c.limit,
    c.leaseUntil,
    c.workerId,
  ];
  const leaseParams = ({ task, leaseUntil }: { task: HeldTask; leaseUntil: Date }) => [
    task.id,
    task.fence,
    leaseUntil,
    task.tenant,
  ];
  // The tasks of the keys `where` picks, with their fingerprints (the task's tenant is `tenant`).
  const withFingerprints = (tenant: string, where: string): string =>
    `SELECT ${prefixed('t', taskColumns)}, k.fingerprint
      FROM ${s}.task_keys k JOIN ${s}.tasks t ON t.tenant_id = ${tenant} AND t.id = k.task_id
      WHERE ${where}`;
  // The queues and the dedupe keys of `keys`, as two arrays.
  const queuesAndKeys = (keys: readonly TaskKey[]) => [keys.map((k) => k.queue), keys.map((k) => k.key)];
  return {
    ...renderEnqueueStatements(s),

    /** The tasks of `keys` with their fingerprints, of any tenants ($1 tenants, $2 queues, $3 keys). */
    existingMany: defineStatement({
      text: withFingerprints(
        'k.tenant_id',
        '(k.tenant_id, k.queue, k.dedupe_key) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))',
      ),
      params: ({ keys }: { keys: readonly TaskKey[] }) => [keys.map((k) => k.tenant), ...queuesAndKeys(keys)],
      result: allRows<KeyedTaskRow>,
    }),

    /** `existingMany` when every task is of one tenant ($1 tenant, $2 queues, $3 keys). */
    existingManyTenant: defineStatement({
      text: withFingerprints(
        '$1',
        'k.tenant_id = $1 AND (k.queue, k.dedupe_key) IN (SELECT * FROM unnest($2::text[], $3::text[]))',
      ),
      params: ({ tenant, keys }: Pinned & { keys: readonly TaskKey[] }) => [tenant, ...queuesAndKeys(keys)],
      result: allRows<KeyedTaskRow>,
    }),

    /** The task of one key with its fingerprint. */
    existing: defineStatement({
      text: withFingerprints('$1', 'k.tenant_id = $1 AND k.queue = $2 AND k.dedupe_key = $3'),
      params: (k: TaskKey) => [k.tenant, k.queue, k.key],
      result: firstRow<KeyedTaskRow>,
    }),

    /**
     * Claims up to $3 tasks in one round trip (see `claimCtes`).
     * $1 queue, $2 now, $3 limit, $4 lease end, $5 worker id.
     */
    claim: prepared('claim', {
      text: `WITH ${claimCtes(s, '$1', '$2', '$3', '$4', '$5', null, '')}
      SELECT * FROM updated WHERE state = 'claimed' ORDER BY id`,
      params: claimParams,
      result: allRows<TaskRow>,
    }),

    /** `claim` of one tenant's tasks: $6 tenant. */
    claimTenant: prepared('claimTenant', {
      text: `WITH ${claimCtes(s, '$1', '$2', '$3', '$4', '$5', '$6', '')}
      SELECT * FROM updated WHERE state = 'claimed' ORDER BY id`,
      params: (b: ClaimBatch & Pinned) => [...claimParams(b), b.tenant],
      result: allRows<TaskRow>,
    }),

    /**
     * Completes a batch (fenced, like `completeMany`) and claims the next one in one statement
     * (see `completeAndClaim`). Returns one row: the ids accepted, and the claimed tasks as JSON.
     * $10 the done tasks' tenants, one per task.
     */
    completeAndClaim: prepared('completeAndClaim', {
      text: completeAndClaim(s, null),
      params: (c: Completions & ClaimBatch) => [...completeAndClaimParams(c), c.tasks.map((t) => t.tenant)],
      result: (result) => result.rows[0] as CompletedAndClaimed,
    }),

    /**
     * `completeAndClaim` of one task, claiming at most one (the claims worker's slot): its values
     * as scalars and its limit a constant, so PostgreSQL keeps the prepared statement's generic
     * plan. The batch form's generic plan is costed for ten unnested tasks and a LIMIT of 10 % of
     * the queue (129 against 49 for the custom plan of one task), so PostgreSQL planned it again at
     * every execution: 343 µs of planning per task beside 285 µs of execution (pg_stat_statements,
     * 6,000 tasks). $1 id, $2 fence, $3 result, $4 now, $5 expiry, $6 queue, $7 lease end,
     * $8 worker, $9 the task's tenant; the next task may be any tenant's.
     */
    completeOneAndClaimOne: prepared('completeOneAndClaimOne', {
      text: completeOneAndClaimOne(s),
      params: oneCompletionParams,
      result: (result) => result.rows[0] as CompletedOneAndClaimed,
    }),

    /**
     * `completeOneAndClaimOne` that claims only when the task completed (`runAndClaimNext`, the
     * claims worker's slot): a fenced task's statement claims nothing, even sent alone.
     */
    completeOneThenClaimOne: prepared('completeOneThenClaimOne', {
      text: completeOneAndClaimOne(s, true),
      params: oneCompletionParams,
      result: (result) => result.rows[0] as CompletedOneAndClaimed,
    }),

    /** `completeAndClaim` of one tenant's tasks: $10 tenant (of the tasks done and claimed). */
    completeAndClaimTenant: prepared('completeAndClaimTenant', {
      text: completeAndClaim(s, '$10'),
      params: (c: Completions & ClaimBatch & Pinned) => [...completeAndClaimParams(c), c.tenant],
      result: (result) => result.rows[0] as CompletedAndClaimed,
    }),

    /**
     * Checks the fence and renews the lease. Inside a caller's transaction it also row-locks the
     * task until that transaction ends, so no claim can take it over meanwhile (the claim's
     * SKIP LOCKED passes it by). No row back means the lease was taken over.
     */
    guard: prepared('guard', {
      text: `UPDATE ${s}.tasks SET visible_at = greatest(visible_at, $3)
      WHERE tenant_id = $4 AND id = $1 AND fence = $2 AND state = 'claimed'
      RETURNING visible_at`,
      params: leaseParams,
      result: affectedRows,
    }),

    /**
     * `guard` without the lease renewal, for `run`'s own transaction: checks the fence and
     * row-locks the task until the transaction ends, writing nothing. The lock alone keeps every
     * claim off the task (SKIP LOCKED), and the transaction ends with the completion, so a lease
     * renewed here would never be read. Not writing spares each task a row version and an entry in
     * the claimable index (the guard's UPDATE changes an indexed column, so it is never HOT).
     * $3 tenant.
     */
    lock: prepared('lock', {
      text: `SELECT 1 FROM ${s}.tasks
      WHERE tenant_id = $3 AND id = $1 AND fence = $2 AND state = 'claimed'
      FOR NO KEY UPDATE`,
      params: ({ task }: { task: HeldTask }) => [task.id, task.fence, task.tenant],
      result: (result) => result.rows.length,
    }),

    /**
     * `lock` that aborts the transaction when the fence does not hold, instead of returning no
     * row: a division by zero (22012, the count of rows locked is 0), at execution, not planning
     * (the divisor is not a constant). `run` sends it with BEGIN and does not wait for its answer
     * (see `lockTaskAhead`): the handler's statements and the completion queue behind it on the
     * same connection, and if it failed they all fail and COMMIT rolls back. $3 tenant.
     */
    lockOrAbort: prepared('lockOrAbort', {
      text: `SELECT 1 / count(*)::int AS held FROM (
        SELECT 1 FROM ${s}.tasks
        WHERE tenant_id = $3 AND id = $1 AND fence = $2 AND state = 'claimed'
        FOR NO KEY UPDATE) locked`,
      params: ({ task }: { task: HeldTask }) => [task.id, task.fence, task.tenant],
      // One row (held = 1) when it returns at all.
      result: affectedRows,
    }),

    /** Sets the lease end (a heartbeat). $4 tenant. */
    heartbeat: prepared('heartbeat', {
      text: `UPDATE ${s}.tasks SET visible_at = $3
      WHERE tenant_id = $4 AND id = $1 AND fence = $2 AND state = 'claimed'`,
      params: leaseParams,
      result: affectedRows,
    }),

    /**
     * Completes one task; the fence check makes a zombie's completion a no-op ($1 id, $2 fence,
     * $6 tenant).
     */
    complete: prepared('complete', {
      text: `UPDATE ${s}.tasks SET state = 'completed', result = $3, finished_at = $4, expires_at = $5,
        locked_by = NULL
      WHERE tenant_id = $6 AND id = $1 AND fence = $2 AND state = 'claimed'`,
      params: (c: { task: HeldTask; result: string; now: Date; expiresAt: Date }) => [
        c.task.id,
        c.task.fence,
        c.result,
        c.now,
        c.expiresAt,
        c.task.tenant,
      ],
      result: affectedRows,
    }),

    /**
     * Completes a batch in one round trip; returns the ids that were accepted. $6 the tasks'
     * tenants, one per task.
     */
    completeMany: prepared('completeMany', {
      text: `UPDATE ${s}.tasks t SET state = 'completed', result = c.result, finished_at = $4,
        expires_at = $5, locked_by = NULL
      FROM unnest($1::bigint[], $2::bigint[], $3::text[], $6::text[]) AS c(id, fence, result, tenant_id)
      WHERE t.tenant_id = c.tenant_id AND t.id = c.id AND t.fence = c.fence AND t.state = 'claimed'
      RETURNING t.id`,
      params: (c: Completions) => [...completions(c), c.tasks.map((t) => t.tenant)],
      result: allRows<{ id: string }>,
    }),

    /** `completeMany` of one tenant's tasks: $6 tenant. */
    completeManyTenant: prepared('completeManyTenant', {
      text: `UPDATE ${s}.tasks t SET state = 'completed', result = c.result, finished_at = $4,
        expires_at = $5, locked_by = NULL
      FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS c(id, fence, result)
      WHERE t.tenant_id = $6 AND t.id = c.id AND t.fence = c.fence AND t.state = 'claimed'
      RETURNING t.id`,
      params: (c: Completions & Pinned) => [...completions(c), c.tenant],
      result: allRows<{ id: string }>,
    }),

    /**
     * Records a failure: back to ready with a later `visible_at` while attempts remain and the
     * error is retryable, otherwise dead. $1 id, $2 fence, $3 retry at, $4 error, $5 retryable,
     * $6 now, $7 dead expiry, $8 tenant. No row back means the lease was taken over.
     */
    fail: defineStatement({
      text: `UPDATE ${s}.tasks SET
        state = CASE WHEN $5::boolean AND attempts < max_attempts THEN 'ready' ELSE 'dead' END,
        visible_at = CASE WHEN $5::boolean AND attempts < max_attempts THEN $3::timestamptz ELSE visible_at END,
        finished_at = CASE WHEN $5::boolean AND attempts < max_attempts THEN NULL ELSE $6::timestamptz END,
        expires_at = CASE WHEN $5::boolean AND attempts < max_attempts THEN NULL ELSE $7::timestamptz END,
        last_error = $4, locked_by = NULL
      WHERE tenant_id = $8 AND id = $1 AND fence = $2 AND state = 'claimed'
      RETURNING state, visible_at`,
      params: (f: {
        task: HeldTask;
        retryAt: Date;
        error: string;
        retryable: boolean;
        now: Date;
        expiresAt: Date;
      }) => [f.task.id, f.task.fence, f.retryAt, f.error, f.retryable, f.now, f.expiresAt, f.task.tenant],
      result: firstRow<{ state: 'ready' | 'dead'; visible_at: unknown }>,
    }),

    /** Gives a task back without counting an attempt (a worker shutting down). $4 tenant. */
    release: defineStatement({
      text: `UPDATE ${s}.tasks SET state = 'ready', visible_at = $3, attempts = greatest(attempts - 1, 0),
        locked_by = NULL
      WHERE tenant_id = $4 AND id = $1 AND fence = $2 AND state = 'claimed'`,
      params: ({ task, now }: { task: HeldTask; now: Date }) => [task.id, task.fence, now, task.tenant],
      result: affectedRows,
    }),

    /** A task by id in any tenant: without the tenant, no primary-key lookup (a scan of its index). */
    byId: defineStatement({
      text: `SELECT ${taskColumns} FROM ${s}.tasks WHERE id = $1`,
      params: ({ id }: { id: string }) => [id],
      result: firstRow<TaskRow>,
    }),
    /** A task by its primary key: $1 id, $2 tenant. */
    byIdTenant: defineStatement({
      text: `SELECT ${taskColumns} FROM ${s}.tasks WHERE tenant_id = $2 AND id = $1`,
      params: ({ id, tenant }: { id: string } & Pinned) => [id, tenant],
      result: firstRow<TaskRow>,
    }),

    /** A task by its dedupe key. */
    byKey: defineStatement({
      text: `SELECT ${prefixed('t', taskColumns)} FROM ${s}.task_keys k
        JOIN ${s}.tasks t ON t.tenant_id = $1 AND t.id = k.task_id
      WHERE k.tenant_id = $1 AND k.queue = $2 AND k.dedupe_key = $3`,
      params: (k: TaskKey) => [k.tenant, k.queue, k.key],
      result: firstRow<TaskRow>,
    }),

    /** $1 queue, $2 limit, $3 tenant or null. */
    dead: defineStatement({
      text: `SELECT ${taskColumns} FROM ${s}.tasks WHERE queue = $1 AND state = 'dead'
        AND ($3::text IS NULL OR tenant_id = $3)
      ORDER BY finished_at, id LIMIT $2`,
      params: (d: { queue: string; limit: number; tenant: string | null }) => [d.queue, d.limit, d.tenant],
      result: allRows<TaskRow>,
    }),

    /** Puts a dead task back with fresh attempts. The fence is kept: it only ever rises. */
    redrive: defineStatement({
      text: `UPDATE ${s}.tasks SET state = 'ready', attempts = 0, visible_at = $2, finished_at = NULL,
        expires_at = NULL
      WHERE id = $1 AND state = 'dead'
      RETURNING ${taskColumns}`,
      params: ({ id, visibleAt }: { id: string; visibleAt: Date }) => [id, visibleAt],
      result: firstRow<TaskRow>,
    }),
    /** `redrive` by primary key: $3 tenant. */
    redriveTenant: defineStatement({
      text: `UPDATE ${s}.tasks SET state = 'ready', attempts = 0, visible_at = $2, finished_at = NULL,
        expires_at = NULL
      WHERE tenant_id = $3 AND id = $1 AND state = 'dead'
      RETURNING ${taskColumns}`,
      params: (r: { id: string; visibleAt: Date } & Pinned) => [r.id, r.visibleAt, r.tenant],
      result: firstRow<TaskRow>,
    }),

    /** Deletes finished tasks past retention with their dedupe keys; answers how many tasks. */
    sweep: sweepBatch(sweepStatement(s, null), deletedColumn),
    /** `sweep` of one tenant: $3 tenant. */
    sweepTenant: tenantSweepStatement(sweepStatement(s, '$3'), deletedColumn),
  };
}

/** What `completeAndClaim` answers: the ids accepted, and the claimed tasks as JSON text. */
export interface CompletedAndClaimed {
  completed: string[];
  claimed: string;
}

/** One task's completion, and the claim of its slot's next task (`completeOneAndClaimOne`). */
export interface OneCompletion {
  task: HeldTask;
  /** The handler's value as JSON text. */
  result: string;
  now: Date;
  expiresAt: Date;
  queue: string;
  leaseUntil: Date;
  workerId: string;
}

/** `OneCompletion` as `completeOneAndClaimOne`'s parameters ($1 … $9). */
function oneCompletionParams(c: OneCompletion): unknown[] {
  return [
    c.task.id,
    c.task.fence,
    c.result,
    c.now,
    c.expiresAt,
    c.queue,
    c.leaseUntil,
    c.workerId,
    c.task.tenant,
  ];
}

/** What `completeOneAndClaimOne` answers: whether the task was completed, and the claimed task (JSON). */
export interface CompletedOneAndClaimed {
  completed: boolean;
  claimed: string;
}

export type ClaimStatements = ReturnType<typeof renderClaimStatements>;

/**
 * Deletes finished tasks past retention with their dedupe keys (found by their primary key, which
 * the task row carries); returns the tasks deleted.
 */
function sweepStatement(s: string, tenant: string | null): string {
  return `WITH due AS (
        SELECT tenant_id, id FROM ${s}.tasks
        WHERE ${tenant === null ? '' : `tenant_id = ${tenant} AND `}expires_at <= $1
        ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
      ), gone AS (
        DELETE FROM ${s}.tasks t USING due
        WHERE ${tenant === null ? 't.tenant_id = due.tenant_id' : `t.tenant_id = ${tenant}`} AND t.id = due.id
        RETURNING t.tenant_id, t.id, t.queue, t.dedupe_key
      ), keys AS (
        DELETE FROM ${s}.task_keys k USING gone
        WHERE ${tenant === null ? 'k.tenant_id = gone.tenant_id' : `k.tenant_id = ${tenant}`}
          AND k.queue = gone.queue AND k.dedupe_key = gone.dedupe_key AND k.task_id = gone.id
        RETURNING 1
      )
      SELECT (SELECT count(*) FROM gone)::int AS deleted, (SELECT count(*) FROM keys)::int AS keys`;
}
