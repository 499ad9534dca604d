import { prepareNames } from '../core/prepared-statements.js';
import { quoteSchema } from '../core/schema-name.js';
import { requestColumns } from './request-row.js';

/**
 * Every statement the keyed-operation engine sends, rendered once per schema. Keeping them in one
 * place makes the hot path's round trips countable: a first execution recorded at commit sends
 * the handler's statements and `record` (plus `read` in front when that is on); one recorded
 * claim-first sends `claim`, the handler's statements and `complete`; a replay sends only `read`.
 */
export function renderStatements(schema: string) {
  const s = quoteSchema(schema);
  const pk = `tenant_id = $1 AND operation = $2 AND idempotency_key = $3`;
  const texts = {
    /**
     * Claims a new key inside the caller's transaction, in one round trip.
     * ON CONFLICT DO NOTHING waits while another open transaction holds the same key, and returns
     * no row once that one commits. The bounded wait is `lock_timeout`, set only for this
     * statement: the first CTE sets it (saving the caller's value), the outer SELECT, which runs
     * after the INSERT has finished, puts the caller's value back. A timeout raises 55P03.
     * $9 is the wait, as a PostgreSQL interval string.
     */
    claim: `WITH setting AS (
        SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', $9, true)
      ), inserted AS (
        INSERT INTO ${s}.requests
          (tenant_id, operation, idempotency_key, fingerprint, state, fence, locked_until,
           created_at, expires_at, tombstone_until)
        SELECT $1, $2, $3, $4, 'pending', 1, $5, $6, $7, $8 FROM setting
        ON CONFLICT DO NOTHING
        RETURNING 1
      )
      SELECT count(*)::int AS claimed, set_config('lock_timeout', (SELECT previous FROM setting), true) AS restored
      FROM inserted`,

    /**
     * Commit-time recording: the completed record, inserted as the last statement of the
     * handler's transaction, instead of a claim before the handler and an UPDATE after it (one
     * statement instead of two; pgbench at c=32 measured BEGIN; INSERT; this; COMMIT at 0.61× a
     * plain one-INSERT transaction against 0.44–0.52× for read; BEGIN; claim; INSERT; complete;
     * COMMIT). A concurrent duplicate's insert waits on the unique index until the first commits,
     * then returns no row; the bounded wait is the same statement-scoped `lock_timeout` as the
     * claim's ($13). `recorded` 0: the key has a row, read it and decide. The wrapper that bounds
     * the wait costs little: BEGIN; INSERT; this; COMMIT ran at 6,380 tps against 6,684 with a bare
     * INSERT … ON CONFLICT DO NOTHING (pgbench, prepared, c=16, three alternating 5 s rounds on
     * the 2-core bench machine, a plain BEGIN; INSERT; COMMIT at 8,860): within the spread.
     */
    record: recordStatement(s, 'ON CONFLICT DO NOTHING'),

    /**
     * `record` for a transaction that sends it together with COMMIT (a pipelined pool, see
     * `queryAndCommit` in core/sql.ts): with no ON CONFLICT, a key that already has a row raises
     * 23505, which aborts the transaction, so the COMMIT behind it rolls the handler's writes
     * back. (With DO NOTHING, the COMMIT would keep them without a record.) The caller reads the
     * row afterwards; a row whose tombstone passed is taken over by running `record` again.
     */
    recordOrFail: recordStatement(s, ''),

    /** Commit-time recording over a key whose tombstone has passed: it is new again. */
    recordOverForgotten: `UPDATE ${s}.requests SET
        fingerprint = $4, state = $5, fence = fence + 1, locked_until = NULL, recovery_point = NULL,
        result = $6, body = $7, resource_type = $8, resource_id = $9, error = NULL, error_step = NULL,
        created_at = $10, completed_at = $10, expires_at = $11, tombstone_until = $12
      WHERE ${pk} AND state <> 'pending' AND tombstone_until <= $10
      RETURNING fence`,

    /** Claims a key outside any transaction: used by multi-step operations (commits at once). */
    claimCommitted: `INSERT INTO ${s}.requests
        (tenant_id, operation, idempotency_key, fingerprint, state, fence, locked_until,
         created_at, expires_at, tombstone_until)
      VALUES ($1, $2, $3, $4, 'pending', 1, $5, $6, $7, $8)
      ON CONFLICT DO NOTHING
      RETURNING fence`,

    read: `SELECT ${requestColumns} FROM ${s}.requests WHERE ${pk}`,

    /** Reuses a key whose tombstone has passed: it is new again. */
    reclaimForgotten: `UPDATE ${s}.requests SET
        fingerprint = $4, state = 'pending', fence = fence + 1, locked_until = $5, recovery_point = NULL,
        result = NULL, body = NULL, resource_type = NULL, resource_id = NULL, error = NULL, error_step = NULL,
        created_at = $6, completed_at = NULL, expires_at = $7, tombstone_until = $8
      WHERE ${pk} AND tombstone_until <= $6
      RETURNING fence`,

    /** Forgets the steps of a key that is being reused after its tombstone passed. */
    forgetSteps: `DELETE FROM ${s}.steps WHERE ${pk}`,

    /** Takes over a pending operation whose holder's lease ran out. Raises the fence. */
    takeOver: `UPDATE ${s}.requests SET fence = fence + 1, locked_until = $5
      WHERE ${pk} AND state = 'pending' AND fence = $4 AND (locked_until IS NULL OR locked_until <= $6)
      RETURNING fence`,

    /** Renews the lease and moves the recovery point; no row back means the fence was raised. */
    fenceAndRenew: `UPDATE ${s}.requests SET locked_until = $5, recovery_point = coalesce($6, recovery_point)
      WHERE ${pk} AND state = 'pending' AND fence = $4
      RETURNING fence`,

    /** Lets a retry take over at once after a retryable failure. */
    releaseLease: `UPDATE ${s}.requests SET locked_until = $5
      WHERE ${pk} AND state = 'pending' AND fence = $4`,

    /**
     * Stores the outcome of a single-transaction operation. It sets no indexed column (expiry was
     * fixed at the claim), so on a page with room it is a HOT update: no index writes.
     */
    complete: `UPDATE ${s}.requests SET
        state = $5, result = $6, body = $7, resource_type = $8, resource_id = $9,
        completed_at = $10, locked_until = NULL
      WHERE ${pk} AND state = 'pending' AND fence = $4`,

    /**
     * Stores the outcome of a multi-step operation, which may finish long after its claim, so its
     * retention is counted from completion. The fence check makes a zombie's completion a no-op.
     */
    completeLate: `UPDATE ${s}.requests SET
        state = $5, result = $6, body = $7, resource_type = $8, resource_id = $9,
        completed_at = $10, expires_at = $11, tombstone_until = $12, locked_until = NULL
      WHERE ${pk} AND state = 'pending' AND fence = $4`,

    /**
     * The recorded steps; a call that started and has no result yet is not one. `result_meta`:
     * the result's type annotations (migration 0009), NULL for plain JSON and older rows.
     */
    readSteps: `SELECT step, result, result_meta FROM ${s}.steps WHERE ${pk} AND result IS NOT NULL`,

    /** Records a local step's result ($5 its plain JSON, $8 its type annotations), in the step's transaction. */
    recordStep: `INSERT INTO ${s}.steps
        (tenant_id, operation, idempotency_key, step, result, fence, completed_at, result_meta)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,

    /**
     * Before a call, in one statement on its own: checks the fence, renews the lease, moves the
     * recovery point to `call:<name>` ($6) and marks the call as started ($7 the step, $8 the
     * time), committed before the call runs: from here on an external effect may exist. A retry
     * that repeats the call finds the row and keeps the first start time. `held` 0: fenced.
     * One statement instead of a transaction of two: 1 round trip instead of 4, while a burst of
     * calls starts at once (40 calls on a pool of 8: see test/operations/calls-hold-nothing.test.ts).
     */
    startCall: `WITH held AS (
        UPDATE ${s}.requests SET locked_until = $5, recovery_point = $6
        WHERE ${pk} AND state = 'pending' AND fence = $4
        RETURNING 1
      ), started AS (
        INSERT INTO ${s}.steps (tenant_id, operation, idempotency_key, step, kind, fence, started_at)
        SELECT $1, $2, $3, $7, 'call', $4, $8 FROM held
        ON CONFLICT DO NOTHING
      )
      SELECT count(*)::int AS held FROM held`,

    /**
     * After a call, in one statement: checks the fence, renews the lease, moves the recovery
     * point to the step ($6) and records the call's result ($7, with its type annotations $9).
     * `held` 0: fenced, nothing written.
     */
    recordCall: `WITH held AS (
        UPDATE ${s}.requests SET locked_until = $5, recovery_point = $6
        WHERE ${pk} AND state = 'pending' AND fence = $4
        RETURNING 1
      ), recorded AS (
        INSERT INTO ${s}.steps
          (tenant_id, operation, idempotency_key, step, kind, result, result_meta, fence, started_at, completed_at)
        SELECT $1, $2, $3, $6, 'call', $7, $9, $4, $8, $8 FROM held
        ON CONFLICT (tenant_id, operation, idempotency_key, step)
        DO UPDATE SET result = EXCLUDED.result, result_meta = EXCLUDED.result_meta, fence = EXCLUDED.fence,
          completed_at = EXCLUDED.completed_at
      )
      SELECT count(*)::int AS held FROM held`,

    /**
     * Frees the key of a multi-step operation that failed for good before it committed anything:
     * no step recorded and no call started (checked here, in the same statement). A retry runs
     * afresh, as after a failed single-transaction operation.
     */
    releaseKey: `DELETE FROM ${s}.requests r
      WHERE r.tenant_id = $1 AND r.operation = $2 AND r.idempotency_key = $3
        AND r.state = 'pending' AND r.fence = $4
        AND NOT EXISTS (SELECT 1 FROM ${s}.steps st
          WHERE st.tenant_id = $1 AND st.operation = $2 AND st.idempotency_key = $3)`,

    /**
     * Ends a multi-step operation that failed for good after it had committed a step or started a
     * call: state 'failed' with the error and the step, replayed to every retry until its
     * tombstone passes. Retention counts from now, as for `completeLate`.
     */
    failLate: `UPDATE ${s}.requests SET
        state = 'failed', error = $5, error_step = $6, completed_at = $7, expires_at = $8,
        tombstone_until = $9, locked_until = NULL
      WHERE ${pk} AND state = 'pending' AND fence = $4`,

    /** The sweeper's batches (see `sweepBodies`). */
    sweepBodies: sweepBodies(s, ''),
    sweepRows: sweepRows(s, ''),
    /** The sweeper's batches in one tenant ($3), for a sweeper scoped to tenants. */
    sweepBodiesTenant: sweepBodies(s, 'tenant_id = $3 AND '),
    sweepRowsTenant: sweepRows(s, 'tenant_id = $3 AND '),
  };
  // Each statement gets a prepared-statement name unique to its schema and text (`idem_<key>_<hash>`).
  return { ...texts, names: prepareNames('', texts) };
}

/**
 * The sweeper's batches address rows by ctid: the locked rows cannot move while the statement
 * holds them, and a ctid lookup skips re-finding each row through the primary key (about 4
 * buffer hits per row measured on a 1000-row batch). `pin` limits them to one tenant.
 */
function sweepBodies(s: string, pin: string): string {
  return `UPDATE ${s}.requests SET result = NULL, body = NULL
      WHERE ${pin}ctid = ANY(ARRAY(
        SELECT ctid FROM ${s}.requests
        WHERE ${pin}expires_at <= $1 AND (result IS NOT NULL OR body IS NOT NULL) AND state <> 'pending'
        LIMIT $2 FOR UPDATE SKIP LOCKED
      ))`;
}

function sweepRows(s: string, pin: string): string {
  return `DELETE FROM ${s}.requests
      WHERE ${pin}ctid = ANY(ARRAY(
        SELECT ctid FROM ${s}.requests
        WHERE ${pin}tombstone_until <= $1 AND (state <> 'pending' OR locked_until IS NULL OR locked_until <= $1)
        LIMIT $2 FOR UPDATE SKIP LOCKED
      ))`;
}

/**
 * The completed record, inserted with a statement-scoped bounded wait (`lock_timeout` $13, set by
 * the first CTE and put back by the outer SELECT). `onConflict` is `ON CONFLICT DO NOTHING` for
 * `record` (no row back: the key has one) or empty for `recordOrFail` (23505).
 */
function recordStatement(s: string, onConflict: string): string {
  return `WITH setting AS (
        SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', $13, true)
      ), inserted AS (
        INSERT INTO ${s}.requests
          (tenant_id, operation, idempotency_key, fingerprint, state, fence, result, body,
           resource_type, resource_id, created_at, completed_at, expires_at, tombstone_until)
        SELECT $1, $2, $3, $4, $5, 1, $6, $7, $8, $9, $10, $10, $11, $12 FROM setting
        ${onConflict}
        RETURNING 1
      )
      SELECT count(*)::int AS recorded, set_config('lock_timeout', (SELECT previous FROM setting), true) AS restored
      FROM inserted`;
}

export type Statements = ReturnType<typeof renderStatements>;
