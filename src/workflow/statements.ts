import { quoteSchema } from '../core/schema-name.js';

// *_meta: a result's type annotations beside its plain JSON (migration 0009; NULL for plain JSON).
const sagaColumns = `tenant_id, saga, saga_key, fingerprint, status, input, cursor, fence, locked_until,
  result, result_meta, error, stuck_error, created_at, updated_at, finished_at`;
const stepColumns = `position, name, action_key, compensation_key, state, result, result_meta,
  compensation_result, compensation_result_meta, compensation_attempts, fence, registered_at, done_at,
  compensated_at`;

/**
 * Every statement of the saga engine, rendered once per schema. $1..$3 are always the saga's
 * (tenant, saga, key) and $4 the holder's fence where there is one: every write after the claim
 * checks the fence, so a holder whose lease was taken over cannot move the saga.
 */
export function renderSagaStatements(schema: string) {
  const s = quoteSchema(schema);
  const pk = `tenant_id = $1 AND saga = $2 AND saga_key = $3`;
  return {
    /** Starts an instance; no row back means it exists. Commits at once (outside any step). */
    insert: `INSERT INTO ${s}.sagas
        (tenant_id, saga, saga_key, fingerprint, status, input, cursor, fence, locked_until, created_at, updated_at)
      VALUES ($1, $2, $3, $4, 'running', $5, 0, 1, $6, $7, $7)
      ON CONFLICT DO NOTHING
      RETURNING fence`,

    read: `SELECT ${sagaColumns} FROM ${s}.sagas WHERE ${pk}`,

    readSteps: `SELECT ${stepColumns} FROM ${s}.saga_steps WHERE ${pk} ORDER BY position`,

    /** Takes over an unfinished instance whose holder's lease lapsed. Raises the fence. */
    takeOver: `UPDATE ${s}.sagas SET fence = fence + 1, locked_until = $5, updated_at = $6
      WHERE ${pk} AND fence = $4 AND status IN ('running', 'compensating')
        AND (locked_until IS NULL OR locked_until <= $6)
      RETURNING fence, status, cursor, error`,

    /**
     * Checks the fence and the direction, renews the lease, and row-locks the saga until the
     * step's transaction ends: a takeover waits for a step in flight instead of racing it.
     */
    fence: `UPDATE ${s}.sagas SET locked_until = $5, updated_at = $6
      WHERE ${pk} AND fence = $4 AND status = $7
      RETURNING cursor`,

    /** Persists a step and its compensation's key before the action runs. */
    registerStep: `INSERT INTO ${s}.saga_steps
        (tenant_id, saga, saga_key, position, name, action_key, compensation_key, state, fence, registered_at)
      VALUES ($1, $2, $3, $5, $6, $7, $8, 'registered', $4, $9)
      ON CONFLICT DO NOTHING`,

    /**
     * Records the action's result ($6, with its type annotations $8) and moves the forward cursor
     * past it, in one statement.
     */
    stepDone: `WITH done AS (
        UPDATE ${s}.saga_steps SET state = 'done', result = $6, result_meta = $8, done_at = $7
        WHERE ${pk} AND position = $5 AND state = 'registered'
        RETURNING position
      )
      UPDATE ${s}.sagas SET cursor = $5 + 1, updated_at = $7
      WHERE ${pk} AND fence = $4 AND EXISTS (SELECT 1 FROM done)`,

    /** Turns the saga backward at the failed step (which is compensated first). */
    startCompensating: `UPDATE ${s}.sagas SET status = 'compensating', cursor = $5, error = $6, updated_at = $7
      WHERE ${pk} AND fence = $4 AND status = 'running'`,

    /**
     * Records a compensation ($6, with its type annotations $8) and moves the backward cursor below
     * it, in one statement.
     */
    stepCompensated: `WITH compensated AS (
        UPDATE ${s}.saga_steps SET state = 'compensated', compensation_result = $6,
          compensation_result_meta = $8, compensated_at = $7
        WHERE ${pk} AND position = $5 AND state <> 'compensated'
        RETURNING position
      )
      UPDATE ${s}.sagas SET cursor = $5 - 1, updated_at = $7
      WHERE ${pk} AND fence = $4 AND EXISTS (SELECT 1 FROM compensated)`,

    /** Counts a failed compensation attempt (durably: the count survives crashes). */
    compensationFailed: `WITH fenced AS (
        SELECT 1 FROM ${s}.sagas WHERE ${pk} AND fence = $4 AND status = 'compensating' FOR UPDATE
      )
      UPDATE ${s}.saga_steps SET compensation_attempts = compensation_attempts + 1
      WHERE ${pk} AND position = $5 AND EXISTS (SELECT 1 FROM fenced)
      RETURNING compensation_attempts`,

    /** Ends the saga: $5 the final status, $6 its result and $9 the result's type annotations. */
    finish: `UPDATE ${s}.sagas SET status = $5, result = $6, result_meta = $9, finished_at = $7, updated_at = $7,
        locked_until = NULL
      WHERE ${pk} AND fence = $4 AND status = $8`,

    /** Parks the saga for an operator; the lease is released. */
    markStuck: `UPDATE ${s}.sagas SET status = 'stuck', stuck_error = $5, updated_at = $6, locked_until = NULL
      WHERE ${pk} AND fence = $4 AND status = 'compensating'`,

    /** An operator's retry of a stuck saga: back to compensating under a new fence. */
    unstick: `UPDATE ${s}.sagas SET status = 'compensating', fence = fence + 1, locked_until = $4,
        updated_at = $5, stuck_error = NULL
      WHERE ${pk} AND status = 'stuck'
      RETURNING fence, cursor`,

    resetCompensationAttempts: `UPDATE ${s}.saga_steps SET compensation_attempts = 0
      WHERE ${pk} AND position = $4`,

    list: `SELECT ${sagaColumns} FROM ${s}.sagas
      WHERE status = ANY($1::text[]) AND ($2::text IS NULL OR saga = $2)
      ORDER BY updated_at, tenant_id, saga, saga_key LIMIT $3`,

    /** Deletes finished sagas past their retention (see `sweepStatement`). */
    sweep: sweepStatement(s, null),
    /** `sweep` of one tenant ($3), for a sweeper scoped to tenants. */
    sweepTenant: sweepStatement(s, '$3'),

    /** Unfinished sagas whose holder is gone (recovery). Uses the partial index sagas_unfinished. */
    lapsed: `SELECT tenant_id, saga, saga_key FROM ${s}.sagas
      WHERE status IN ('running', 'compensating') AND (locked_until IS NULL OR locked_until <= $1)
      ORDER BY updated_at LIMIT $2`,
  };
}

/**
 * Deletes finished sagas past their retention, with their steps (ON DELETE CASCADE), in one
 * bounded batch that skips rows someone holds. Uses the partial index sagas_finished. `tenant`
 * (a parameter) limits it to one tenant.
 */
function sweepStatement(s: string, tenant: string | null): string {
  return `WITH due AS (
        SELECT tenant_id, saga, saga_key FROM ${s}.sagas
        WHERE ${tenant === null ? '' : `tenant_id = ${tenant} AND `}status IN ('completed', 'compensated')
          AND finished_at <= $1
        ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED
      ), gone AS (
        DELETE FROM ${s}.sagas x USING due
        WHERE ${tenant === null ? '' : `x.tenant_id = ${tenant} AND `}x.tenant_id = due.tenant_id
          AND x.saga = due.saga AND x.saga_key = due.saga_key
        RETURNING 1
      )
      SELECT count(*)::int AS deleted FROM gone`;
}

export type SagaStatements = ReturnType<typeof renderSagaStatements>;
