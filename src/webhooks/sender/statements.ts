/**
 * Statements of the sender, rendered once per schema. Times are parameters from the injected clock.
 * Every statement about one message, delivery or endpoint names its tenant (the primary keys lead
 * with tenant_id): a tenant's messages fan out to that tenant's endpoints only. The workers' claim,
 * redrive and sweep come in two forms: across every tenant, and pinned to one (`…Tenant`).
 */
import type { Causation } from '../../core/causation.js';
import { quoteSchema } from '../../core/schema-name.js';
import {
  affectedRows,
  allRows,
  defineStatement,
  firstRow,
  nothing,
  preparedStatement,
  tenantForms,
  type Pinned,
} from '../../core/statement.js';
import { sweepStatement, tenantSweepStatement } from '../../core/sweeper.js';
import type { AttemptRow, ClaimedDelivery, DeliveryRow } from './delivery.js';

const endpointColumns = `tenant_id, id, url, secrets, event_types, enabled, disabled_reason, disabled_at, created_at`;

/** An endpoint's row (`endpointColumns`), decoded by `decode` in endpoints.ts. */
export type EndpointRow = {
  tenant_id: string;
  id: string;
  url: string;
  secrets: string[];
  event_types: string[] | null;
  enabled: boolean;
  disabled_reason: string | null;
  disabled_at: unknown;
  created_at: unknown;
};

/** One endpoint of one tenant, by its primary key. */
export interface EndpointKey {
  tenant: string;
  id: string;
}

/** A claimed delivery as its fenced statements name it: its key and the claim's `attempts`. */
export type HeldDelivery = Pick<ClaimedDelivery, 'tenant_id' | 'message_id' | 'endpoint_id' | 'attempts'>;

/** What a claim takes: up to `limit` deliveries due by `now` (of one message, or any), leased until `leaseUntil`. */
export interface DeliveryClaim {
  now: Date;
  limit: number;
  leaseUntil: Date;
  messageId: string | null;
}

/** Which deliveries a redrive puts back to pending: in `states`, of one endpoint or message. */
export interface DeliveryRedrive {
  now: Date;
  states: readonly string[];
  endpointId: string | null;
  messageId: string | null;
}

/** $1 message id, $2 endpoint id, $3 the claim's attempts: the fence of a claimed delivery's statements. */
const fence = (d: HeldDelivery) => [d.message_id, d.endpoint_id, d.attempts];

/** $1 id, $2 tenant: one endpoint. */
const endpointKey = (e: EndpointKey) => [e.id, e.tenant];

/**
 * The sender's SQL. The hot path's statements (enqueue, claim, the attempt's record and settle)
 * are named prepared statements; the others, run by operators or on rare outcomes, are sent unnamed.
 */
export function renderSenderStatements(schema: string) {
  const s = quoteSchema(schema);
  // Messages whose every delivery is finished, older than the retention; attempts cascade. ctid:
  // the rows are locked, so they cannot move before the DELETE reaches them.
  const sweep = (pin: string | null) => `DELETE FROM ${s}.webhook_messages
      WHERE ${pin === null ? '' : `tenant_id = ${pin} AND `}ctid IN (
        SELECT m.ctid FROM ${s}.webhook_messages m
        WHERE ${pin === null ? '' : `m.tenant_id = ${pin} AND `}m.created_at < $1
          AND NOT EXISTS (SELECT 1 FROM ${s}.webhook_deliveries d
                          WHERE d.tenant_id = m.tenant_id AND d.message_id = m.id
                            AND d.state IN ('pending', 'delivering'))
        LIMIT $2 FOR UPDATE SKIP LOCKED)`;
  return {
    /**
     * Message and its deliveries in one statement: atomic on any connection or in the caller's
     * transaction. A message id seen before adds nothing: the same event is never fanned out
     * twice. Answers how many deliveries it created.
     */
    enqueue: preparedStatement('whs', 'enqueue', {
      text: `WITH m AS (
        INSERT INTO ${s}.webhook_messages
          (tenant_id, id, event_type, payload, content_type, created_at, intent, traceparent)
        VALUES ($6, $1, $2, $3, $4, $5, $7, $8)
        ON CONFLICT (tenant_id, id) DO NOTHING
        RETURNING tenant_id, id
      )
      INSERT INTO ${s}.webhook_deliveries (tenant_id, message_id, endpoint_id, next_attempt_at, created_at)
      SELECT m.tenant_id, m.id, e.id, $5, $5 FROM m, ${s}.webhook_endpoints e
      WHERE e.tenant_id = $6 AND e.enabled AND (e.event_types IS NULL OR $2 = ANY (e.event_types))
      ON CONFLICT DO NOTHING`,
      params: (m: {
        tenant: string;
        id: string;
        type: string;
        payload: Buffer;
        contentType: string;
        now: Date;
        /** The intent it was enqueued in, and its trace context (core/causation.ts). */
        cause: Causation;
      }) => [m.id, m.type, m.payload, m.contentType, m.now, m.tenant, m.cause.intent, m.cause.traceparent],
      result: affectedRows,
    }),

    /**
     * Claims due deliveries of enabled endpoints (optionally of one message) of every tenant
     * (`claim`), or of one (`claimTenant`, $5 tenant), raising `attempts` as the fence, and returns
     * everything an attempt needs in the same round trip.
     */
    ...tenantForms('claim', {
      text: (pin) => `WITH due AS (
        SELECT d.tenant_id, d.message_id, d.endpoint_id FROM ${s}.webhook_deliveries d
        WHERE ${pin === null ? '' : `d.tenant_id = ${pin} AND `}d.state IN ('pending', 'delivering')
          AND d.next_attempt_at <= $1 AND ($4::text IS NULL OR d.message_id = $4)
        ORDER BY d.next_attempt_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      )
      UPDATE ${s}.webhook_deliveries d
      SET state = 'delivering', attempts = d.attempts + 1, next_attempt_at = $3
      FROM due, ${s}.webhook_messages m, ${s}.webhook_endpoints e
      WHERE ${pin === null ? 'd.tenant_id = due.tenant_id' : `d.tenant_id = ${pin}`}
        AND d.message_id = due.message_id AND d.endpoint_id = due.endpoint_id
        AND m.tenant_id = d.tenant_id AND m.id = d.message_id
        AND e.tenant_id = d.tenant_id AND e.id = d.endpoint_id
      RETURNING d.tenant_id, d.message_id, d.endpoint_id, d.attempts, m.event_type, m.payload,
        m.content_type, e.url, e.secrets, e.enabled, m.intent, m.traceparent`,
      pin: '$5',
      params: (c: DeliveryClaim) => [c.now, c.limit, c.leaseUntil, c.messageId],
      result: allRows<ClaimedDelivery>,
      prepared: 'whs',
    }),

    /** Logs one HTTP attempt. */
    recordAttempt: preparedStatement('whs', 'recordAttempt', {
      text: `INSERT INTO ${s}.webhook_delivery_attempts
        (tenant_id, message_id, endpoint_id, attempt, started_at, status, latency_ms, outcome, error, retry_after_ms)
      VALUES ($10, $1, $2, $3, $4, $5, $6, $7, $8, $9)`,
      params: (a: {
        delivery: HeldDelivery;
        startedAt: Date;
        status: number | null;
        latencyMs: number;
        outcome: string;
        error: string | null;
        retryAfterMs: number | null;
      }) => [
        ...fence(a.delivery),
        a.startedAt,
        a.status,
        a.latencyMs,
        a.outcome,
        a.error,
        a.retryAfterMs,
        a.delivery.tenant_id,
      ],
      result: nothing,
    }),

    /** Fenced by the claimed attempt number; `now` is the delivery time of a delivered one. */
    settle: preparedStatement('whs', 'settle', {
      text: `UPDATE ${s}.webhook_deliveries
      SET state = $4, next_attempt_at = $5, last_status = $6, last_error = $7,
          delivered_at = CASE WHEN $4 = 'delivered' THEN $8::timestamptz ELSE delivered_at END
      WHERE tenant_id = $9 AND message_id = $1 AND endpoint_id = $2 AND state = 'delivering' AND attempts = $3`,
      params: (t: {
        delivery: HeldDelivery;
        state: string;
        next: Date;
        status: number | null;
        error: string | null;
        now: Date;
      }) => [...fence(t.delivery), t.state, t.next, t.status, t.error, t.now, t.delivery.tenant_id],
      result: nothing,
    }),

    /** No request was made (circuit open, endpoint disabled): the claim's attempt is given back. */
    release: defineStatement({
      text: `UPDATE ${s}.webhook_deliveries
      SET state = $4, attempts = attempts - 1, next_attempt_at = $5, last_error = $6
      WHERE tenant_id = $7 AND message_id = $1 AND endpoint_id = $2 AND state = 'delivering' AND attempts = $3`,
      params: (r: { delivery: HeldDelivery; state: 'pending' | 'cancelled'; next: Date; error: string }) => [
        ...fence(r.delivery),
        r.state,
        r.next,
        r.error,
        r.delivery.tenant_id,
      ],
      result: nothing,
    }),

    /** Disables an enabled endpoint; answers 1 when it did. */
    disableEndpoint: defineStatement({
      text: `UPDATE ${s}.webhook_endpoints
      SET enabled = false, disabled_reason = $2, disabled_at = $3
      WHERE tenant_id = $4 AND id = $1 AND enabled`,
      params: (d: EndpointKey & { reason: string; now: Date }) => [d.id, d.reason, d.now, d.tenant],
      result: affectedRows,
    }),

    /** Cancels an endpoint's pending deliveries, with the reason. */
    cancelEndpointDeliveries: defineStatement({
      text: `UPDATE ${s}.webhook_deliveries
      SET state = 'cancelled', last_error = $2
      WHERE tenant_id = $3 AND endpoint_id = $1 AND state = 'pending'`,
      params: (c: EndpointKey & { error: string }) => [c.id, c.error, c.tenant],
      result: nothing,
    }),

    /**
     * Puts deliveries of every tenant (`redrive`), or of one (`redriveTenant`, $5 tenant), back to
     * pending with fresh attempts; answers how many.
     */
    ...tenantForms('redrive', {
      text: (pin) => `UPDATE ${s}.webhook_deliveries d
      SET state = 'pending', attempts = 0, next_attempt_at = $1
      FROM ${s}.webhook_endpoints e
      WHERE ${pin === null ? '' : `d.tenant_id = ${pin} AND `}e.tenant_id = d.tenant_id
        AND e.id = d.endpoint_id AND e.enabled
        AND d.state = ANY ($2::text[])
        AND ($3::text IS NULL OR d.endpoint_id = $3)
        AND ($4::text IS NULL OR d.message_id = $4)`,
      pin: '$5',
      params: (r: DeliveryRedrive) => [r.now, r.states, r.endpointId, r.messageId],
      result: affectedRows,
    }),

    /** The logged attempts of a message (to one endpoint, or every one), in order. */
    attempts: defineStatement({
      text: `SELECT tenant_id, message_id, endpoint_id, attempt, started_at, status, latency_ms, outcome, error,
        retry_after_ms
      FROM ${s}.webhook_delivery_attempts
      WHERE tenant_id = $3 AND message_id = $1 AND ($2::text IS NULL OR endpoint_id = $2)
      ORDER BY id`,
      params: (a: { tenant: string; messageId: string; endpointId: string | null }) => [
        a.messageId,
        a.endpointId,
        a.tenant,
      ],
      result: allRows<AttemptRow>,
    }),

    /** Deliveries of one message, endpoint or tenant, or every one. */
    deliveries: defineStatement({
      text: `SELECT tenant_id, message_id, endpoint_id, state, attempts, next_attempt_at, last_status, last_error,
        delivered_at
      FROM ${s}.webhook_deliveries
      WHERE ($1::text IS NULL OR message_id = $1) AND ($2::text IS NULL OR endpoint_id = $2)
        AND ($4::text IS NULL OR tenant_id = $4)
      ORDER BY created_at, endpoint_id LIMIT $3`,
      params: (d: {
        messageId: string | null;
        endpointId: string | null;
        limit: number;
        tenant: string | null;
      }) => [d.messageId, d.endpointId, d.limit, d.tenant],
      result: allRows<DeliveryRow>,
    }),

    /** Finished messages past their retention, every tenant ($1 cutoff, $2 batch size). */
    sweep: sweepStatement(sweep(null)),
    /** `sweep` of one tenant ($3). */
    sweepTenant: tenantSweepStatement(sweep('$3')),

    insertEndpoint: defineStatement({
      text: `INSERT INTO ${s}.webhook_endpoints (tenant_id, id, url, secrets, event_types, created_at)
      VALUES ($6, $1, $2, $3, $4, $5)
      RETURNING ${endpointColumns}`,
      params: (
        e: EndpointKey & { url: string; secrets: string[]; eventTypes: string[] | null; now: Date },
      ) => [e.id, e.url, e.secrets, e.eventTypes, e.now, e.tenant],
      result: firstRow<EndpointRow>,
    }),
    /** Changes what is given (`null`: kept); the event types only when `setEventTypes`. */
    updateEndpoint: defineStatement({
      text: `UPDATE ${s}.webhook_endpoints
      SET url = COALESCE($2, url), secrets = COALESCE($3, secrets),
          event_types = CASE WHEN $5 THEN $4 ELSE event_types END
      WHERE tenant_id = $6 AND id = $1
      RETURNING ${endpointColumns}`,
      params: (
        u: EndpointKey & {
          url: string | null;
          secrets: string[] | null;
          eventTypes: string[] | null;
          setEventTypes: boolean;
        },
      ) => [u.id, u.url, u.secrets, u.eventTypes, u.setEventTypes, u.tenant],
      result: firstRow<EndpointRow>,
    }),
    enableEndpoint: defineStatement({
      text: `UPDATE ${s}.webhook_endpoints
      SET enabled = true, disabled_reason = NULL, disabled_at = NULL
      WHERE tenant_id = $2 AND id = $1
      RETURNING ${endpointColumns}`,
      params: endpointKey,
      result: firstRow<EndpointRow>,
    }),
    getEndpoint: defineStatement({
      text: `SELECT ${endpointColumns} FROM ${s}.webhook_endpoints WHERE tenant_id = $2 AND id = $1`,
      params: endpointKey,
      result: firstRow<EndpointRow>,
    }),
    listEndpoints: defineStatement({
      text: `SELECT ${endpointColumns} FROM ${s}.webhook_endpoints WHERE tenant_id = $1 ORDER BY created_at, id`,
      params: ({ tenant }: Pinned) => [tenant],
      result: allRows<EndpointRow>,
    }),
    /** Answers 1 when it removed the endpoint. */
    deleteEndpoint: defineStatement({
      text: `DELETE FROM ${s}.webhook_endpoints WHERE tenant_id = $2 AND id = $1`,
      params: endpointKey,
      result: affectedRows,
    }),
  };
}

export type SenderStatements = ReturnType<typeof renderSenderStatements>;
