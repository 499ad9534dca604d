/** The claims view's reads (views/tasks.ts): counts per queue and state, dead and stuck tasks. */
import { quoteSchema } from '../../core/schema-name.js';
import { allRows, defineStatement } from '../../core/statement.js';

/** A task row as the view reads it (`columns`), decoded there. */
export type TaskRow = Record<string, unknown>;

/** The view's filters: one tenant, one queue, either or both left out for all. */
export interface TaskFilter {
  tenant?: string | undefined;
  queue?: string | undefined;
}

/** A page of a list: at most `limit` tasks, due or lapsed as of `now`. */
export interface TaskPage extends TaskFilter {
  limit: number;
  now: Date;
}

const columns = `id, tenant_id, queue, dedupe_key, state, attempts, max_attempts, fence, locked_by, last_error,
  visible_at, created_at, finished_at, payload, intent`;

/** $1 tenant and $2 queue, each matching every value when null: every statement's filter. */
const filter = `($1::text IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR queue = $2)`;

/**
 * The console's statements about claims' tasks, rendered once per schema. They run rarely (an
 * operator's page), so they are sent unnamed.
 */
export function renderTaskStatements(schema: string) {
  const s = quoteSchema(schema);
  return {
    /** Tasks per queue and state, with the oldest due time of the ready ones ($3 now). */
    counts: defineStatement({
      text: `SELECT queue, state, count(*)::bigint AS n,
          min(visible_at) FILTER (WHERE state = 'ready' AND visible_at <= $3) AS oldest_due
        FROM ${s}.tasks WHERE ${filter} GROUP BY queue, state ORDER BY queue, state`,
      params: (f: TaskFilter & { now: Date }) => [f.tenant ?? null, f.queue ?? null, f.now],
      result: allRows<{ queue: unknown; state: unknown; n: unknown; oldest_due: unknown }>,
    }),

    /** Dead tasks, the last to die first ($3 limit). */
    dead: defineStatement({
      text: `SELECT ${columns} FROM ${s}.tasks WHERE state = 'dead' AND ${filter}
        ORDER BY finished_at DESC NULLS LAST, id DESC LIMIT $3`,
      params: (p: Omit<TaskPage, 'now'>) => [p.tenant ?? null, p.queue ?? null, p.limit],
      result: allRows<TaskRow>,
    }),

    /** Claimed tasks whose lease ended by `now` ($4), the longest lapsed first ($3 limit). */
    stuck: defineStatement({
      text: `SELECT ${columns} FROM ${s}.tasks WHERE state = 'claimed' AND visible_at <= $4 AND ${filter}
        ORDER BY visible_at LIMIT $3`,
      params: (p: TaskPage) => [p.tenant ?? null, p.queue ?? null, p.limit, p.now],
      result: allRows<TaskRow>,
    }),
  };
}

/** The claims view's statements. */
export type TaskStatements = ReturnType<typeof renderTaskStatements>;
