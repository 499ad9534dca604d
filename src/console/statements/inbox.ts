/** The inbox view's reads (views/inbox.ts): per-consumer counts and the dead messages. */
import { quoteSchema } from '../../core/schema-name.js';
import { allRows, defineStatement } from '../../core/statement.js';

/** A dead message as the view reads it, decoded there. */
export type DeadMessageRow = Record<string, unknown>;

/** The view's filter: one consumer, or all when left out. */
export interface ConsumerFilter {
  consumer?: string | undefined;
}

/**
 * The console's statements about the inbox, rendered once per schema. They run rarely (an
 * operator's page), so they are sent unnamed.
 */
export function renderInboxStatements(schema: string) {
  const s = quoteSchema(schema);
  return {
    /** Processed and dead messages and duplicates seen, per consumer (at most 200 consumers). */
    consumers: defineStatement({
      text: `SELECT consumer, count(*) FILTER (WHERE state = 'processed')::bigint AS processed,
          count(*) FILTER (WHERE state = 'dead')::bigint AS dead, coalesce(sum(duplicates), 0)::bigint AS duplicates
        FROM ${s}.inbox WHERE $1::text IS NULL OR consumer = $1
        GROUP BY consumer ORDER BY consumer LIMIT 200`,
      params: (f: ConsumerFilter) => [f.consumer ?? null],
      result: allRows<{ consumer: unknown; processed: unknown; dead: unknown; duplicates: unknown }>,
    }),

    /** Dead messages, the latest first ($2 limit). */
    dead: defineStatement({
      text: `SELECT consumer, message_id, attempts, last_error, origin, payload, headers::text AS headers,
          processed_at, expires_at, intent
        FROM ${s}.inbox WHERE state = 'dead' AND ($1::text IS NULL OR consumer = $1)
        ORDER BY processed_at DESC LIMIT $2`,
      params: (p: ConsumerFilter & { limit: number }) => [p.consumer ?? null, p.limit],
      result: allRows<DeadMessageRow>,
    }),
  };
}

/** The inbox view's statements. */
export type InboxStatements = ReturnType<typeof renderInboxStatements>;
