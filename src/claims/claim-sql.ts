/**
 * The SQL text of the claim and of the completions that claim the next task in the same statement
 * (rendered into prepared statements by statements.ts).
 */
import { taskColumns } from './task-columns.js';

/**
 * The claim, as CTEs `picked` and `updated`. The inner SELECT walks the partial index
 * `tasks_claimable` (queue, visible_at, id) over tasks that are due or whose lease lapsed, and
 * SKIP LOCKED lets concurrent workers take disjoint rows without waiting for each other. The
 * UPDATE raises the fence (so the previous holder of a lapsed lease is fenced off), counts the
 * attempt and sets the lease. A lapsed task that has used all its attempts is dead-lettered here
 * instead of being handed out again: a task that kills its worker cannot loop forever.
 */
export function claimCtes(
  s: string,
  queue: string,
  now: string,
  limit: string,
  leaseEnd: string,
  worker: string,
  tenant: string | null,
  extra: string,
) {
  const exhausted = `t.state = 'claimed' AND t.attempts >= t.max_attempts`;
  // Pinned: `tasks_claimable_tenant` (tenant_id, queue, visible_at, id); across tenants:
  // `tasks_claimable` (queue, visible_at, id). The UPDATE finds the picked rows by ctid: they are
  // locked, so they cannot move, and a TID lookup skips a probe of the (tenant_id, id) key.
  return `picked AS (
        SELECT ctid FROM ${s}.tasks
        WHERE ${tenant === null ? '' : `tenant_id = ${tenant} AND `}queue = ${queue}
          AND state IN ('ready', 'claimed') AND visible_at <= ${now}::timestamptz ${extra}
        ORDER BY visible_at, id
        LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
      ), updated AS (
        UPDATE ${s}.tasks t SET
          state = CASE WHEN ${exhausted} THEN 'dead' ELSE 'claimed' END,
          fence = t.fence + 1,
          attempts = CASE WHEN ${exhausted} THEN t.attempts ELSE t.attempts + 1 END,
          visible_at = ${leaseEnd},
          locked_by = ${worker},
          last_error = CASE WHEN t.state = 'claimed' THEN 'lease expired' ELSE t.last_error END,
          finished_at = CASE WHEN ${exhausted} THEN ${now}::timestamptz ELSE NULL END
        WHERE ${tenant === null ? '' : `t.tenant_id = ${tenant} AND `}t.ctid = ANY(ARRAY(SELECT ctid FROM picked))
        RETURNING ${prefixed('t', taskColumns)}
      )`;
}

/**
 * Completes a batch (fenced, like `completeMany`) and claims the next one in one statement:
 * one round trip and one commit per batch instead of two. On this machine commits are bound
 * by WAL flushes (fdatasync 4.2 ms, pg_test_fsync), so halving them is what moves throughput.
 * The claim skips the tasks being completed ($1), which the same statement cannot lock twice.
 * Returns one row: the ids accepted, and the claimed tasks as JSON. Across tenants, $10 holds the
 * done tasks' tenants (one per task); pinned, $10 is the one tenant of the done and claimed tasks.
 */
export function completeAndClaim(s: string, tenant: string | null): string {
  const done =
    tenant === null
      ? `FROM unnest($1::bigint[], $2::bigint[], $3::text[], $10::text[]) AS c(id, fence, result, tenant_id)
        WHERE t.tenant_id = c.tenant_id AND t.id = c.id`
      : `FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS c(id, fence, result)
        WHERE t.tenant_id = ${tenant} AND t.id = c.id`;
  return `WITH done AS (
        UPDATE ${s}.tasks t SET state = 'completed', result = c.result, finished_at = $4, expires_at = $5,
          locked_by = NULL
        ${done} AND t.fence = c.fence AND t.state = 'claimed'
        RETURNING t.id
      ), ${claimCtes(s, '$6', '$4', '$7', '$8', '$9', tenant, 'AND NOT (id = ANY($1::bigint[]))')}
      SELECT (SELECT coalesce(array_agg(id::text), '{}') FROM done) AS completed,
        (SELECT coalesce(json_agg(u ORDER BY u.id), '[]') FROM updated u WHERE u.state = 'claimed')::text AS claimed`;
}

/**
 * `completeAndClaim` of one task (`completeOneAndClaimOne`): scalar values, LIMIT 1. The claim
 * does not depend on the completion: a caller whose task was refused still gets the next one.
 * `onlyIfCompleted` (`completeOneThenClaimOne`, the claims worker's completion): a task that is not
 * completed (fenced) claims nothing. That completion may go out alone, outside a transaction a
 * fenced completion would roll back (see `transactionOnFirstUse`), and a claim that committed
 * there would strand its task until its lease ended. (An initplan: `done` is read once, before
 * the scan.)
 */
export function completeOneAndClaimOne(s: string, onlyIfCompleted = false): string {
  const claimable = onlyIfCompleted ? 'AND id <> $1 AND EXISTS (SELECT FROM done)' : 'AND id <> $1';
  return `WITH done AS (
        UPDATE ${s}.tasks t SET state = 'completed', result = $3, finished_at = $4, expires_at = $5,
          locked_by = NULL
        WHERE t.tenant_id = $9 AND t.id = $1 AND t.fence = $2 AND t.state = 'claimed'
        RETURNING t.id
      ), ${claimCtes(s, '$6', '$4', '1', '$7', '$8', null, claimable)}
      SELECT EXISTS (SELECT 1 FROM done) AS completed,
        (SELECT coalesce(json_agg(u), '[]') FROM updated u WHERE u.state = 'claimed')::text AS claimed`;
}

/** `columns` (a comma-separated list) each prefixed with `alias.`. */
export function prefixed(alias: string, columns: string): string {
  return columns
    .split(',')
    .map((c) => `${alias}.${c.trim()}`)
    .join(', ');
}
