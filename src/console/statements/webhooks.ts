/**
 * The webhooks view's reads (views/webhooks.ts): receipts per source and state, the receipt lists,
 * and the sender's deliveries and disabled endpoints. Endpoint secrets are never read.
 */
import { quoteSchema } from '../../core/schema-name.js';
import { allRows, defineStatement } from '../../core/statement.js';

/** A receipt as the lists read it (`receiptColumns` and `applied_version`), decoded by the view. */
export type ReceiptRow = Record<string, unknown>;

/** The receipts' filter: one source, or all when left out. */
export interface SourceFilter {
  source?: string | undefined;
}

/** A page of a receipt list: at most `limit` receipts. */
export interface SourcePage extends SourceFilter {
  limit: number;
}

const receiptColumns = `r.tenant_id, r.source, r.delivery_id, r.event_type, r.state,
  r.attempts - r.deferrals AS attempts, r.last_error, r.received_at,
  r.next_attempt_at, r.processed_at, r.entity_scope, r.entity_key, r.entity_version::text AS entity_version,
  r.headers::text AS headers, r.body`;

/**
 * The console's statements about webhooks, rendered once per schema. They run rarely (an
 * operator's page), so they are sent unnamed.
 */
export function renderWebhookStatements(schema: string) {
  const s = quoteSchema(schema);
  /**
   * Receipts where `where` holds, of $1 source (every source when null), in `order`, at most $2;
   * a superseded one with the version its entity is at. `where` and `order` are fixed fragments
   * of this module; every value is a parameter.
   */
  const receiptList = (where: string, order: string) =>
    `SELECT ${receiptColumns}, v.version::text AS applied_version
      FROM ${s}.webhook_receipts r
      LEFT JOIN ${s}.webhook_entity_versions v
        ON r.state = 'superseded' AND v.scope = r.entity_scope AND v.entity_key = r.entity_key
      WHERE ${where} AND ($1::text IS NULL OR r.source = $1) ORDER BY ${order} LIMIT $2`;
  const byState = (state: string, order: string) =>
    defineStatement({
      text: receiptList(`r.state = '${state}'`, order),
      params: (p: SourcePage) => [p.source ?? null, p.limit],
      result: allRows<ReceiptRow>,
    });
  return {
    /** Receipts per source and state, with the oldest unfinished (pending or processing) one. */
    counts: defineStatement({
      text: `SELECT source, state, count(*)::bigint AS n,
          min(received_at) FILTER (WHERE state IN ('pending', 'processing')) AS oldest
        FROM ${s}.webhook_receipts WHERE $1::text IS NULL OR source = $1
        GROUP BY source, state ORDER BY source, state`,
      params: (f: SourceFilter) => [f.source ?? null],
      result: allRows<{ source: unknown; state: unknown; n: unknown; oldest: unknown }>,
    }),

    /** Dead receipts, the latest received first. */
    dead: byState('dead', 'r.received_at DESC'),
    /** Receipts older than the version already applied to their entity, the latest first. */
    superseded: byState('superseded', 'r.processed_at DESC NULLS LAST'),
    /** Receipts no handler took, the latest first. */
    unhandled: byState('unhandled', 'r.processed_at DESC NULLS LAST'),

    /** Claimed receipts whose lease ended by `now` ($3), the longest lapsed first. */
    stuck: defineStatement({
      text: receiptList(`r.state = 'processing' AND r.next_attempt_at <= $3`, 'r.next_attempt_at'),
      params: (p: SourcePage & { now: Date }) => [p.source ?? null, p.limit, p.now],
      result: allRows<ReceiptRow>,
    }),

    /** The sender's deliveries per state. */
    deliveryCounts: defineStatement({
      text: `SELECT state, count(*)::bigint AS n FROM ${s}.webhook_deliveries GROUP BY state`,
      params: (_: void) => [],
      result: allRows<{ state: unknown; n: unknown }>,
    }),

    /** Failed and cancelled deliveries with their event type and endpoint URL, the latest first. */
    failedDeliveries: defineStatement({
      text: `SELECT d.tenant_id, d.message_id, d.endpoint_id, m.event_type, e.url, d.state, d.attempts,
          d.last_status, d.last_error, d.created_at
        FROM ${s}.webhook_deliveries d
        LEFT JOIN ${s}.webhook_messages m ON m.tenant_id = d.tenant_id AND m.id = d.message_id
        LEFT JOIN ${s}.webhook_endpoints e ON e.tenant_id = d.tenant_id AND e.id = d.endpoint_id
        WHERE d.state IN ('failed', 'cancelled')
        ORDER BY d.created_at DESC LIMIT $1`,
      params: (p: { limit: number }) => [p.limit],
      result: allRows<Record<string, unknown>>,
    }),

    /** Disabled endpoints (never their secrets), the latest disabled first. */
    disabledEndpoints: defineStatement({
      text: `SELECT id, url, disabled_reason, disabled_at FROM ${s}.webhook_endpoints
        WHERE NOT enabled ORDER BY disabled_at DESC NULLS LAST LIMIT $1`,
      params: (p: { limit: number }) => [p.limit],
      result: allRows<{ id: unknown; url: unknown; disabled_reason: unknown; disabled_at: unknown }>,
    }),
  };
}

/** The webhooks view's statements. */
export type WebhookStatements = ReturnType<typeof renderWebhookStatements>;
