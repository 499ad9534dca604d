/**
 * The enqueue statements of the claims engine (a part of `renderClaimStatements`, statements.ts):
 * a task and its dedupe key in one round trip, with the intent and trace context it was enqueued
 * in (`core/causation.ts`), so the work a task does later names its cause.
 */
import { allRows, defineStatement, firstRow } from '../core/statement.js';
import { taskColumns, type KeyedTaskRow, type NewTask } from './task-columns.js';

/** `enqueue` and `enqueueMany`, for the schema `s` (quoted). */
export function renderEnqueueStatements(s: string) {
  return {
    /**
     * Inserts a task unless its (tenant, queue, dedupe key) exists, in one round trip: the key
     * row takes a fresh task id (ON CONFLICT DO NOTHING waits for a concurrent enqueuer of the
     * same key to commit, then returns no row) and the task row is inserted only with it.
     * `existing` reads the winner: a second statement, because a statement's snapshot cannot see
     * a row committed while it waited.
     */
    enqueue: defineStatement({
      text: `WITH key AS (
        INSERT INTO ${s}.task_keys (tenant_id, queue, dedupe_key, fingerprint, task_id)
        VALUES ($1, $2, $3, $4, nextval('${s}.task_ids'))
        ON CONFLICT DO NOTHING
        RETURNING task_id, fingerprint
      ), task AS (
        INSERT INTO ${s}.tasks (id, tenant_id, queue, dedupe_key, payload, state, visible_at, max_attempts, created_at, intent, traceparent)
        SELECT task_id, $1, $2, $3, $5, 'ready', $6, $7, $8, $9, $10 FROM key
        RETURNING ${taskColumns}
      )
      SELECT task.*, key.fingerprint FROM task, key`,
      params: (t: NewTask & { now: Date }) => [
        t.tenant,
        t.queue,
        t.key,
        t.fingerprint,
        t.payload,
        t.visibleAt,
        t.maxAttempts,
        t.now,
        t.intent,
        t.traceparent,
      ],
      result: firstRow<KeyedTaskRow>,
    }),

    /** `enqueue` for many tasks (arrays, one element per task); a key repeated in the arrays yields one task. */
    enqueueMany: defineStatement({
      text: `WITH input AS (
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::int[])
          WITH ORDINALITY AS u(t, q, k, f, p, v, m, n)
      ), key AS (
        INSERT INTO ${s}.task_keys (tenant_id, queue, dedupe_key, fingerprint, task_id)
        SELECT t, q, k, f, nextval('${s}.task_ids') FROM input ORDER BY n
        ON CONFLICT DO NOTHING
        RETURNING tenant_id, queue, dedupe_key, fingerprint, task_id
      ), task AS (
        INSERT INTO ${s}.tasks (id, tenant_id, queue, dedupe_key, payload, state, visible_at, max_attempts, created_at, intent, traceparent)
        SELECT DISTINCT ON (key.task_id) key.task_id, i.t, i.q, i.k, i.p, 'ready', i.v, i.m, $8, $9, $10
        FROM key JOIN input i ON i.t = key.tenant_id AND i.q = key.queue AND i.k = key.dedupe_key
        ORDER BY key.task_id, i.n
        RETURNING ${taskColumns}
      )
      SELECT task.*, key.fingerprint FROM task JOIN key ON key.task_id = task.id`,
      params: ({ tasks, now }: { tasks: readonly NewTask[]; now: Date }) => [
        tasks.map((t) => t.tenant),
        tasks.map((t) => t.queue),
        tasks.map((t) => t.key),
        tasks.map((t) => t.fingerprint),
        tasks.map((t) => t.payload),
        tasks.map((t) => t.visibleAt),
        tasks.map((t) => t.maxAttempts),
        now,
        // One cause for the whole batch: it is enqueued by one call, in one intent.
        tasks[0]?.intent ?? null,
        tasks[0]?.traceparent ?? null,
      ],
      result: allRows<KeyedTaskRow>,
    }),
  };
}
