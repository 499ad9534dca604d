/** The outbox view's reads (views/outbox.ts): backlog per topic, dead and retrying events. */
import { quoteSchema } from '../../core/schema-name.js';
import { allRows, defineStatement } from '../../core/statement.js';

/** An event as the view reads it (`columns`), decoded there. */
export type OutboxEventRow = Record<string, unknown>;

/** The view's filter: one topic (`aggregatetype`), or all when left out. */
export interface TopicFilter {
  topic?: string | undefined;
}

/** A page of a list: at most `limit` events. */
export interface TopicPage extends TopicFilter {
  limit: number;
}

const columns = `id, aggregatetype, aggregateid, type, payload::text AS payload, headers::text AS headers,
  attempts, last_error, created_at, available_at, dead_at, intent, traceparent`;

/**
 * The console's statements about the outbox, rendered once per schema. They run rarely (an
 * operator's page), so they are sent unnamed. Each reads only unpublished rows: the partial
 * indexes on published_at IS NULL / dead_at keep them small even when millions of published rows
 * are still retained.
 */
export function renderOutboxStatements(schema: string) {
  const s = quoteSchema(schema);
  return {
    /** Pending and dead events and the oldest pending one, per topic (at most 200 topics). */
    topics: defineStatement({
      text: `SELECT aggregatetype AS topic,
          count(*) FILTER (WHERE dead_at IS NULL)::bigint AS pending,
          count(*) FILTER (WHERE dead_at IS NOT NULL)::bigint AS dead,
          min(created_at) FILTER (WHERE dead_at IS NULL) AS oldest
        FROM ${s}.outbox WHERE published_at IS NULL AND ($1::text IS NULL OR aggregatetype = $1)
        GROUP BY aggregatetype ORDER BY aggregatetype LIMIT 200`,
      params: (f: TopicFilter) => [f.topic ?? null],
      result: allRows<{ topic: unknown; pending: unknown; dead: unknown; oldest: unknown }>,
    }),

    /** Dead events, the last to die first ($2 limit). */
    dead: defineStatement({
      text: `SELECT ${columns} FROM ${s}.outbox
        WHERE dead_at IS NOT NULL AND published_at IS NULL AND ($1::text IS NULL OR aggregatetype = $1)
        ORDER BY dead_at DESC, seq DESC LIMIT $2`,
      params: (p: TopicPage) => [p.topic ?? null, p.limit],
      result: allRows<OutboxEventRow>,
    }),

    /** Pending events with at least one failed attempt, the oldest first ($2 limit). */
    retrying: defineStatement({
      text: `SELECT ${columns} FROM ${s}.outbox
        WHERE published_at IS NULL AND dead_at IS NULL AND attempts > 0
          AND ($1::text IS NULL OR aggregatetype = $1)
        ORDER BY created_at, seq LIMIT $2`,
      params: (p: TopicPage) => [p.topic ?? null, p.limit],
      result: allRows<OutboxEventRow>,
    }),
  };
}

/** The outbox view's statements. */
export type OutboxStatements = ReturnType<typeof renderOutboxStatements>;
