/**
 * Webhooks in an intent's timeline (migration 0012): the messages the intent enqueued, each
 * delivery to an endpoint and every attempt's answer; the receipts that touched it (a receipt
 * whose handler started the intent, named by `requests.caused_by`; one whose handler acted for it,
 * named by `acted_for`; or the receipt of a delivery the intent sent, named by its `idem-intent`
 * header); and the reverse lookup `delivery`.
 */
import { parseIntentRef, parseReceiptRef, receiptRef } from '../core/causation.js';
import type { OperationScope } from '../core/errors.js';
import { quoteSchema } from '../core/schema-name.js';
import type { Queryable } from '../core/sql.js';
import { allRows, defineStatement, firstRow } from '../core/statement.js';
import { iso } from './items.js';
import type { IntentInput, TraceRow } from './statements.js';
import type { TimelineItem } from './types.js';

const text = (value: unknown): string | null => (typeof value === 'string' ? value : null);
const optionalNumber = (value: unknown): number | null => (value === null ? null : Number(value));

/** The webhook statements of `createTrace`, rendered for one schema. */
export function renderWebhookTraceStatements(schema: string) {
  const s = quoteSchema(schema);
  return {
    /** Deliveries of the messages the intent enqueued (one per endpoint). */
    sent: defineStatement({
      text: `SELECT m.tenant_id, m.id, m.event_type, m.created_at, m.traceparent, d.endpoint_id, d.state,
        d.attempts, d.last_status, d.last_error, d.delivered_at
      FROM ${s}.webhook_messages m
      JOIN ${s}.webhook_deliveries d ON d.tenant_id = m.tenant_id AND d.message_id = m.id
      WHERE m.intent = $1 ORDER BY m.created_at, d.endpoint_id`,
      params: ({ ref }: IntentInput) => [ref],
      result: allRows<TraceRow>,
    }),
    /** Every attempt of those deliveries, with its answer. */
    attempts: defineStatement({
      text: `SELECT a.tenant_id, a.message_id, a.endpoint_id, a.attempt, a.started_at, a.status, a.latency_ms,
        a.outcome, a.error
      FROM ${s}.webhook_messages m
      JOIN ${s}.webhook_delivery_attempts a ON a.tenant_id = m.tenant_id AND a.message_id = m.id
      WHERE m.intent = $1 ORDER BY a.started_at, a.endpoint_id, a.attempt`,
      params: ({ ref }: IntentInput) => [ref],
      result: allRows<TraceRow>,
    }),
    /**
     * Receipts of deliveries the intent sent ($1), receipts whose handler acted for it ($1,
     * migration 0013), or the receipt that started it ($2–$4).
     */
    received: defineStatement({
      text: `SELECT tenant_id, source, delivery_id, event_type, state, attempts, last_error, received_at,
        processed_at, intent, acted_for, traceparent
      FROM ${s}.webhook_receipts
      WHERE intent = $1 OR acted_for = $1 OR (tenant_id = $2 AND source = $3 AND delivery_id = $4)`,
      params: (r: {
        ref: string;
        causedBy: { tenant: string; source: string; deliveryId: string } | null;
      }) => [r.ref, r.causedBy?.tenant ?? null, r.causedBy?.source ?? null, r.causedBy?.deliveryId ?? null],
      result: allRows<TraceRow>,
    }),
    /** A received delivery's receipts (one per tenant that has the source). */
    receipts: defineStatement({
      text: `SELECT tenant_id, intent, acted_for FROM ${s}.webhook_receipts
      WHERE source = $1 AND delivery_id = $2 AND ($3::text IS NULL OR tenant_id = $3)`,
      params: (r: { source: string; deliveryId: string; tenant: string | null }) => [
        r.source,
        r.deliveryId,
        r.tenant,
      ],
      result: allRows<{ tenant_id: string; intent: string | null; acted_for: string | null }>,
    }),
    /** The intents a receipt's handler started, oldest first. */
    causedByReceipt: defineStatement({
      text: `SELECT tenant_id, operation, idempotency_key FROM ${s}.requests WHERE caused_by = $1
      ORDER BY created_at`,
      params: ({ ref }: { ref: string }) => [ref],
      result: allRows<TraceRow>,
    }),
    /** The intent that enqueued a sent message. */
    sentIntent: defineStatement({
      text: `SELECT intent FROM ${s}.webhook_messages
      WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2) AND intent IS NOT NULL LIMIT 1`,
      params: (m: { id: string; tenant: string | null }) => [m.id, m.tenant],
      result: firstRow<{ intent: string }>,
    }),
  };
}

export type WebhookTraceStatements = ReturnType<typeof renderWebhookTraceStatements>;

/** The webhook items of an intent's timeline; `causedBy` is its request's `caused_by`. */
export async function webhookItems(
  statements: WebhookTraceStatements,
  db: Queryable,
  input: IntentInput,
  causedBy: string | null,
): Promise<TimelineItem[]> {
  const receipt = causedBy === null ? null : parseReceiptRef(causedBy);
  const [sent, attempts, received] = await Promise.all([
    statements.sent(db, input),
    statements.attempts(db, input),
    statements.received(db, { ref: input.ref, causedBy: receipt }),
  ]);
  const isCause = (r: TraceRow) =>
    receipt !== null &&
    r.tenant_id === receipt.tenant &&
    r.source === receipt.source &&
    r.delivery_id === receipt.deliveryId;
  return [
    ...sent.map((r): TimelineItem => ({
      kind: 'webhook-sent',
      at: iso(r.created_at),
      tenant: String(r.tenant_id),
      messageId: String(r.id),
      type: String(r.event_type),
      endpointId: String(r.endpoint_id),
      state: String(r.state),
      attempts: Number(r.attempts),
      lastStatus: optionalNumber(r.last_status),
      lastError: text(r.last_error),
      deliveredAt: iso(r.delivered_at),
      traceparent: text(r.traceparent),
    })),
    ...attempts.map((r): TimelineItem => ({
      kind: 'webhook-attempt',
      at: iso(r.started_at),
      tenant: String(r.tenant_id),
      messageId: String(r.message_id),
      endpointId: String(r.endpoint_id),
      attempt: Number(r.attempt),
      status: optionalNumber(r.status),
      outcome: String(r.outcome),
      latencyMs: Number(r.latency_ms),
      error: text(r.error),
    })),
    ...received.map((r): TimelineItem => ({
      kind: 'webhook-received',
      at: iso(r.received_at),
      tenant: String(r.tenant_id),
      source: String(r.source),
      deliveryId: String(r.delivery_id),
      type: text(r.event_type),
      relation: isCause(r) ? 'caused' : r.acted_for === input.ref ? 'acted-for' : 'sent',
      state: String(r.state),
      attempts: Number(r.attempts),
      lastError: text(r.last_error),
      processedAt: iso(r.processed_at),
      senderIntent: text(r.intent),
      traceparent: text(r.traceparent),
    })),
  ];
}

/** Which delivery `delivery` looks up: a received one (with `source`) or a sent one. */
export interface DeliveryQuery {
  deliveryId: string;
  source: string | null;
  tenant: string | null;
}

/**
 * The intents a delivery names, the first one to trace first. A received delivery (`source`
 * given): the intents its handler started, oldest first, then the intent it acted for
 * (`onBehalfOf`), then the sender's intent its `idem-intent` header named. A sent one: the intent
 * that enqueued the message.
 */
export async function deliveryIntents(
  statements: WebhookTraceStatements,
  db: Queryable,
  query: DeliveryQuery,
): Promise<OperationScope[]> {
  if (query.source === null) {
    const row = await statements.sentIntent(db, { id: query.deliveryId, tenant: query.tenant });
    const scope = row ? parseIntentRef(row.intent) : null;
    return scope ? [scope] : [];
  }
  const receipts = await statements.receipts(db, { ...query, source: query.source });
  const touched: OperationScope[] = [];
  const actedFor: OperationScope[] = [];
  const senders: OperationScope[] = [];
  for (const receipt of receipts) {
    const ref = receiptRef({ tenant: receipt.tenant_id, source: query.source, deliveryId: query.deliveryId });
    for (const r of await statements.causedByReceipt(db, { ref })) {
      touched.push({
        tenant: String(r.tenant_id),
        operation: String(r.operation),
        key: String(r.idempotency_key),
      });
    }
    const acted = receipt.acted_for === null ? null : parseIntentRef(receipt.acted_for);
    if (acted) actedFor.push(acted);
    const sender = receipt.intent === null ? null : parseIntentRef(receipt.intent);
    if (sender) senders.push(sender);
  }
  return [...touched, ...actedFor, ...senders];
}
