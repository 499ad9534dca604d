/** Messages, deliveries and attempts: what the sender stores and answers, and their rows. */
import { toMillis } from '../../core/clock.js';
import { InvalidArgumentError } from '../../core/errors.js';

/** A message to deliver. */
export interface WebhookMessage {
  /** The `webhook-id` on every attempt: use the outbox event id. 1–255 printable ASCII, no `.`. */
  id: string;
  /** The event type; endpoints subscribe by type. */
  type: string;
  /** The body: bytes or text as they are, anything else as JSON. Stored once; every attempt sends these bytes. */
  payload: unknown;
  /** Default `application/json`. */
  contentType?: string;
  /**
   * The tenant the message belongs to: it is delivered to that tenant's endpoints only, and its
   * rows live with the tenant's. Default: the sender's `tenant` option (`''` unless set).
   */
  tenant?: string;
}

/** What one claimed delivery came to. */
export type AttemptOutcome =
  'delivered' | 'retry' | 'failed' | 'gone' | 'circuit-open' | 'cancelled' | 'lost';

export interface AttemptResult {
  tenant: string;
  messageId: string;
  endpointId: string;
  attempt: number;
  outcome: AttemptOutcome;
  /** The HTTP status, when an answer came. */
  status?: number;
  latencyMs?: number;
  /** When the next attempt is due (epoch ms), for `retry` and `circuit-open`. */
  nextAttemptAt?: number;
}

/** A delivery as stored. */
export interface WebhookDelivery {
  tenant: string;
  messageId: string;
  endpointId: string;
  state: 'pending' | 'delivering' | 'delivered' | 'failed' | 'cancelled';
  attempts: number;
  /** Epoch ms. */
  nextAttemptAt: number;
  lastStatus: number | null;
  lastError: string | null;
  /** Epoch ms. */
  deliveredAt: number | null;
}

/** One logged HTTP attempt. */
export interface WebhookDeliveryAttempt {
  tenant: string;
  messageId: string;
  endpointId: string;
  attempt: number;
  /** Epoch ms. */
  startedAt: number;
  status: number | null;
  latencyMs: number;
  outcome: 'delivered' | 'retry' | 'failed' | 'gone';
  error: string | null;
  retryAfterMs: number | null;
}

/** A delivery as the claim returns it, with what an attempt needs. */
export interface ClaimedDelivery {
  tenant_id: string;
  message_id: string;
  endpoint_id: string;
  attempts: number;
  event_type: string;
  payload: Uint8Array;
  content_type: string;
  url: string;
  secrets: string[];
  enabled: boolean;
  /** The intent the message was enqueued in (core/causation.ts), or null. */
  intent: string | null;
  /** The trace context it was enqueued in, or null. */
  traceparent: string | null;
}

/** A delivery's row as `deliveries` reads it, decoded by `decodeDelivery`. */
export type DeliveryRow = {
  tenant_id: string;
  message_id: string;
  endpoint_id: string;
  state: WebhookDelivery['state'];
  attempts: number | string;
  next_attempt_at: unknown;
  last_status: number | string | null;
  last_error: string | null;
  delivered_at: unknown;
};

/** A logged attempt's row as `attempts` reads it, decoded by `decodeAttempt`. */
export type AttemptRow = {
  tenant_id: string;
  message_id: string;
  endpoint_id: string;
  attempt: number | string;
  started_at: unknown;
  status: number | string | null;
  latency_ms: number | string;
  outcome: WebhookDeliveryAttempt['outcome'];
  error: string | null;
  retry_after_ms: number | string | null;
};

/** Refuses an id that cannot be a `webhook-id`. */
export function validateMessageId(id: string): void {
  if (!/^[\x21-\x2d\x2f-\x7e]{1,255}$/.test(id)) {
    throw new InvalidArgumentError(
      'a webhook message id must be 1–255 printable ASCII characters without "."',
    );
  }
}

/** The body as stored: bytes or text as they are, anything else as JSON. */
export function encodePayload(payload: unknown): Buffer {
  if (payload instanceof Uint8Array)
    return Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  if (typeof payload === 'string') return Buffer.from(payload, 'utf8');
  const json = JSON.stringify(payload);
  if (json === undefined) throw new InvalidArgumentError('a webhook payload must be bytes, text or JSON');
  return Buffer.from(json, 'utf8');
}

/** A number column that may be null (drivers hand bigint and numeric over as text). */
const optionalNumber = (value: number | string | null): number | null =>
  value === null ? null : Number(value);

export function decodeDelivery(r: DeliveryRow): WebhookDelivery {
  return {
    tenant: r.tenant_id,
    messageId: r.message_id,
    endpointId: r.endpoint_id,
    state: r.state,
    attempts: Number(r.attempts),
    nextAttemptAt: toMillis(r.next_attempt_at)!,
    lastStatus: optionalNumber(r.last_status),
    lastError: r.last_error ?? null,
    deliveredAt: toMillis(r.delivered_at),
  };
}

export function decodeAttempt(r: AttemptRow): WebhookDeliveryAttempt {
  return {
    tenant: r.tenant_id,
    messageId: r.message_id,
    endpointId: r.endpoint_id,
    attempt: Number(r.attempt),
    startedAt: toMillis(r.started_at)!,
    status: optionalNumber(r.status),
    latencyMs: Number(r.latency_ms),
    outcome: r.outcome,
    error: r.error ?? null,
    retryAfterMs: optionalNumber(r.retry_after_ms),
  };
}
