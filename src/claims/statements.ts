import { quoteSchema } from '../migrate/schema-name.js';

/** The columns a claimed task is read with, in the order `decodeTask` expects. */
export const taskColumns = `id, tenant_id, queue, dedupe_key, payload, state, visible_at, fence, attempts,
  max_attempts, last_error, result, created_at, finished_at`;

/**
 * Every statement of the claims engine, rendered once per schema. The hot path is two round
 * trips per batch: `claim` (one statement for N tasks) and `complete` / `completeMany`.
 */
export function renderClaimStatements(schema: string) {
  const s = quoteSchema(schema);
  return {
    /**
     * Inserts a task unless its (tenant, queue, dedupe key) exists. ON CONFLICT DO NOTHING waits
     * for a concurrent enqueuer of the same key to commit and then returns no row; `existing`
     * reads the winner. Two statements, because a single statement's snapshot cannot see a row
     * committed while it waited.
     */
    enqueue: `INSERT INTO ${s}.tasks
        (tenant_id, queue, dedupe_key, fingerprint, payload, state, visible_at, max_attempts, created_at)
      VALUES ($1, $2, $3, $4, $5, 'ready', $6, $7, $8)
      ON CONFLICT (tenant_id, queue, dedupe_key) DO NOTHING
      RETURNING ${taskColumns}, fingerprint`,

    existing: `SELECT ${taskColumns}, fingerprint FROM ${s}.tasks
      WHERE tenant_id = $1 AND queue = $2 AND dedupe_key = $3`,

    /**
     * Claims up to $3 tasks in one round trip. The inner SELECT walks the partial index
     * `tasks_claimable` (queue, visible_at, id) over tasks that are due or whose lease lapsed, and
     * SKIP LOCKED lets concurrent workers take disjoint rows without waiting for each other. The
     * UPDATE raises the fence (so the previous holder of a lapsed lease is fenced off), counts the
     * attempt and sets the lease. A lapsed task that has used all its attempts is dead-lettered
     * here instead of being handed out again: a task that kills its worker cannot loop forever.
     * $1 queue, $2 now, $3 limit, $4 lease end, $5 worker id.
     */
    claim: `WITH picked AS (
        SELECT id FROM ${s}.tasks
        WHERE queue = $1 AND state IN ('ready', 'claimed') AND visible_at <= $2::timestamptz
        ORDER BY visible_at, id
        LIMIT $3
        FOR UPDATE SKIP LOCKED
      ), updated AS (
        UPDATE ${s}.tasks t SET
          state = CASE WHEN t.state = 'claimed' AND t.attempts >= t.max_attempts THEN 'dead' ELSE 'claimed' END,
          fence = t.fence + 1,
          attempts = CASE WHEN t.state = 'claimed' AND t.attempts >= t.max_attempts THEN t.attempts ELSE t.attempts + 1 END,
          visible_at = $4,
          locked_by = $5,
          last_error = CASE WHEN t.state = 'claimed' THEN 'lease expired' ELSE t.last_error END,
          finished_at = CASE WHEN t.state = 'claimed' AND t.attempts >= t.max_attempts THEN $2::timestamptz ELSE NULL END
        FROM picked WHERE t.id = picked.id
        RETURNING ${prefixed('t', taskColumns)}
      )
      SELECT * FROM updated WHERE state = 'claimed' ORDER BY id`,

    /**
     * Checks the fence and renews the lease. Inside a caller's transaction it also row-locks the
     * task until that transaction ends, so no claim can take it over meanwhile (the claim's
     * SKIP LOCKED passes it by). No row back means the lease was taken over.
     */
    guard: `UPDATE ${s}.tasks SET visible_at = greatest(visible_at, $3)
      WHERE id = $1 AND fence = $2 AND state = 'claimed'
      RETURNING visible_at`,

    /** Sets the lease end (a heartbeat). */
    heartbeat: `UPDATE ${s}.tasks SET visible_at = $3
      WHERE id = $1 AND fence = $2 AND state = 'claimed'`,

    /** Completes one task; the fence check makes a zombie's completion a no-op ($1 id, $2 fence). */
    complete: `UPDATE ${s}.tasks SET state = 'completed', result = $3, finished_at = $4, expires_at = $5,
        locked_by = NULL
      WHERE id = $1 AND fence = $2 AND state = 'claimed'`,

    /** Completes a batch in one round trip; returns the ids that were accepted. */
    completeMany: `UPDATE ${s}.tasks t SET state = 'completed', result = c.result, finished_at = $4,
        expires_at = $5, locked_by = NULL
      FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS c(id, fence, result)
      WHERE t.id = c.id AND t.fence = c.fence AND t.state = 'claimed'
      RETURNING t.id`,

    /**
     * Records a failure: back to ready with a later `visible_at` while attempts remain and the
     * error is retryable, otherwise dead. $1 id, $2 fence, $3 retry at, $4 error, $5 retryable,
     * $6 now, $7 dead expiry.
     */
    fail: `UPDATE ${s}.tasks SET
        state = CASE WHEN $5::boolean AND attempts < max_attempts THEN 'ready' ELSE 'dead' END,
        visible_at = CASE WHEN $5::boolean AND attempts < max_attempts THEN $3::timestamptz ELSE visible_at END,
        finished_at = CASE WHEN $5::boolean AND attempts < max_attempts THEN NULL ELSE $6::timestamptz END,
        expires_at = CASE WHEN $5::boolean AND attempts < max_attempts THEN NULL ELSE $7::timestamptz END,
        last_error = $4, locked_by = NULL
      WHERE id = $1 AND fence = $2 AND state = 'claimed'
      RETURNING state, visible_at`,

    /** Gives a task back without counting an attempt (a worker shutting down). */
    release: `UPDATE ${s}.tasks SET state = 'ready', visible_at = $3, attempts = greatest(attempts - 1, 0),
        locked_by = NULL
      WHERE id = $1 AND fence = $2 AND state = 'claimed'`,

    byId: `SELECT ${taskColumns} FROM ${s}.tasks WHERE id = $1`,

    byKey: `SELECT ${taskColumns} FROM ${s}.tasks WHERE tenant_id = $1 AND queue = $2 AND dedupe_key = $3`,

    dead: `SELECT ${taskColumns} FROM ${s}.tasks WHERE queue = $1 AND state = 'dead'
      ORDER BY finished_at, id LIMIT $2`,

    /** Puts a dead task back with fresh attempts. The fence is kept: it only ever rises. */
    redrive: `UPDATE ${s}.tasks SET state = 'ready', attempts = 0, visible_at = $2, finished_at = NULL,
        expires_at = NULL
      WHERE id = $1 AND state = 'dead'
      RETURNING ${taskColumns}`,

    sweep: `DELETE FROM ${s}.tasks t USING (
        SELECT id FROM ${s}.tasks WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
      ) due WHERE t.id = due.id`,
  };
}

export type ClaimStatements = ReturnType<typeof renderClaimStatements>;

function prefixed(alias: string, columns: string): string {
  return columns
    .split(',')
    .map((c) => `${alias}.${c.trim()}`)
    .join(', ');
}
