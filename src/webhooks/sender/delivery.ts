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
}

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

export function decodeDelivery(r: Record<string, unknown>): WebhookDelivery {
  return {
    tenant: r.tenant_id as string,
    messageId: r.message_id as string,
    endpointId: r.endpoint_id as string,
    state: r.state as WebhookDelivery['state'],
    attempts: Number(r.attempts),
    nextAttemptAt: toMillis(r.next_attempt_at)!,
    lastStatus: r.last_status === null ? null : Number(r.last_status),
    lastError: (r.last_error as string | null) ?? null,
    deliveredAt: toMillis(r.delivered_at),
  };
}

export function decodeAttempt(r: Record<string, unknown>): WebhookDeliveryAttempt {
  return {
    tenant: r.tenant_id as string,
    messageId: r.message_id as string,
    endpointId: r.endpoint_id as string,
    attempt: Number(r.attempt),
    startedAt: toMillis(r.started_at)!,
    status: r.status === null ? null : Number(r.status),
    latencyMs: Number(r.latency_ms),
    outcome: r.outcome as WebhookDeliveryAttempt['outcome'],
    error: (r.error as string | null) ?? null,
    retryAfterMs: r.retry_after_ms === null ? null : Number(r.retry_after_ms),
  };
}
