/**
 * Causation: which intent a record was written on behalf of, and the W3C trace context it was
 * written in. Every record idem writes inside an intent (steps and calls, outbox events, tasks,
 * saga instances, inbox records, and a nested intent's own row) carries both, and every message
 * idem publishes carries them as headers, so "what happened to order 1001?" has one answer across
 * modules and processes (`createTrace`, `idem trace`).
 *
 * The intent travels in an AsyncLocalStorage, as the current idempotency key already does
 * (key-context.ts): `idem.run`, `runIn`, `steps` and defined operations set it around their
 * handler; an inbox handler and a claimed task's handler run in the cause their message or task
 * names. A write reads it where it builds its parameters: no argument to thread, no extra
 * statement, one more column in the INSERT it already sends.
 *
 * Why an intent *reference* (`tenant/operation/key`, each part percent-encoded) and not a hash of
 * the three: it is read by operators ("WHERE intent = 'acme/create-payment/order-1001'"), it is
 * decoded back into the names a reverse lookup needs (a message id → the request, with no table
 * mapping hashes to names), and it is ASCII, so it is a valid value of every header idem writes
 * (AMQP, NATS, HTTP). Its length is bounded (names are at most 200 characters, keys 255), and the
 * lookup indexes are hash indexes, which take any length.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { trace, TraceFlags, type SpanContext } from '@opentelemetry/api';
import type { OperationScope } from './errors.js';
import { validateKey, validateName } from './keys.js';
import { validateTenant } from './tenant.js';

/** What a record names as its cause. Both parts may be null: written outside any intent or trace. */
export interface Causation {
  /** The intent reference (`intentRef`), or null outside any intent. */
  readonly intent: string | null;
  /** A W3C `traceparent` (`00-<trace id>-<span id>-<flags>`), or null outside any trace. */
  readonly traceparent: string | null;
}

/** The headers idem writes on every message it publishes (and reads on every one it consumes). */
export const causationHeaders = {
  /** W3C Trace Context. */
  traceparent: 'traceparent',
  /** The intent reference of the intent that caused the message. */
  intent: 'idem-intent',
} as const;

/**
 * What the AsyncLocalStorage holds. A webhook receipt's handler runs with `actedFor` set: the
 * first intent the handler says it acts for (`onBehalfOf`) is written there, and the receipt
 * records it when it finishes (migration 0013), so that intent's trace shows the receipt.
 */
interface CausationScope extends Causation {
  readonly actedFor?: { ref: string | null };
}

const storage = new AsyncLocalStorage<CausationScope>();

const none: Causation = { intent: null, traceparent: null };

/** The reference of an intent: `tenant/operation/key`, each part percent-encoded (so `/` separates). */
export function intentRef(scope: OperationScope): string {
  return `${encodeURIComponent(scope.tenant)}/${encodeURIComponent(scope.operation)}/${encodeURIComponent(scope.key)}`;
}

/** The names of an intent reference, or null when `ref` is not one. */
export function parseIntentRef(ref: string): OperationScope | null {
  const parts = ref.split('/');
  if (parts.length !== 3) return null;
  try {
    const [tenant, operation, key] = parts.map(decodeURIComponent) as [string, string, string];
    return { tenant, operation, key };
  } catch {
    return null; // a malformed escape
  }
}

/** A webhook receipt, by its primary key. */
export interface ReceiptScope {
  tenant: string;
  source: string;
  deliveryId: string;
}

const receiptPrefix = 'webhook:';

/**
 * The reference of a webhook receipt, `webhook:<tenant>:<source>:<delivery id>` (each part
 * percent-encoded): what a receipt's handler runs on behalf of, so the keyed operations it starts
 * name the receipt in `requests.caused_by`. It has no `/`, so it is never read as an intent
 * reference (`parseIntentRef` refuses it, and a consumer drops it from a message's headers).
 */
export function receiptRef(receipt: ReceiptScope): string {
  const part = encodeURIComponent;
  return `${receiptPrefix}${part(receipt.tenant)}:${part(receipt.source)}:${part(receipt.deliveryId)}`;
}

/** The receipt a `receiptRef` names, or null when `ref` is not one. */
export function parseReceiptRef(ref: string): ReceiptScope | null {
  if (!ref.startsWith(receiptPrefix)) return null;
  const parts = ref.slice(receiptPrefix.length).split(':');
  if (parts.length !== 3) return null;
  try {
    const [tenant, source, deliveryId] = parts.map(decodeURIComponent) as [string, string, string];
    return { tenant, source, deliveryId };
  } catch {
    return null;
  }
}

/** Runs `fn` on behalf of the intent `scope` (the trace context stays what it is). */
export function runAsIntent<T>(scope: OperationScope, fn: () => T): T {
  return storage.run({ intent: intentRef(scope), traceparent: storage.getStore()?.traceparent ?? null }, fn);
}

/**
 * Runs `fn` on behalf of an intent that already happened, from code that is not inside it: what
 * `fn` writes through idem (outbox events, tasks, webhooks sent, the keyed operations it starts)
 * names `intent` as its cause, and the messages it publishes carry it, so `idem trace` shows them
 * on that intent's timeline. Inside a webhook handler the receipt itself records the first intent
 * its handler acted for, so a provider's refund webhook shows on the payment's trace although the
 * provider names no intent of yours.
 *
 * The trace context is left as it is (the handler's span stays the parent of what `fn` does).
 *
 * @example
 * // a `charge.refunded` webhook handler, once it found the payment the charge belongs to
 * await onBehalfOf({ tenant: payment.tenant, operation: 'create-payment', key: payment.idempotency_key }, () =>
 *   outbox.add(tx, { tenant: payment.tenant, topic: 'payments', type: 'payment.refunded', payload }),
 * );
 */
export function onBehalfOf<T>(intent: OperationScope, fn: () => T): T {
  validateTenant(intent.tenant);
  validateName('operation', intent.operation);
  validateKey(intent.key);
  const ref = intentRef(intent);
  const outer = storage.getStore();
  if (outer?.actedFor && outer.actedFor.ref === null) outer.actedFor.ref = ref;
  return storage.run({ intent: ref, traceparent: outer?.traceparent ?? null }, fn);
}

/**
 * Runs `fn` on behalf of `cause` (a message's or a task's), e.g. a consumer's handler. With
 * `actedFor`, `onBehalfOf` inside `fn` writes the first intent it names into it (a receipt's
 * handler).
 */
export function runCausedBy<T>(cause: Causation, fn: () => T, actedFor?: { ref: string | null }): T {
  return storage.run(actedFor ? { ...cause, actedFor } : cause, fn);
}

/**
 * Runs `fn` with `traceparent` as the trace context its writes record and its messages carry (the
 * intent stays what it is): an HTTP caller's, in a process with no tracer provider, so the trace
 * id still travels from the caller through the records and messages the request causes.
 */
export function runInTraceOf<T>(traceparent: string, fn: () => T): T {
  return storage.run({ ...(storage.getStore() ?? none), traceparent }, fn);
}

/** The intent a receipt's handler said it acted for (`onBehalfOf`), read when the receipt finishes. */
export function actedForNow(): string | null {
  return storage.getStore()?.actedFor?.ref ?? null;
}

/**
 * What a record written now names: the current intent, and the trace context of the active
 * OpenTelemetry span, or else the one inherited from the message or task being handled (so a
 * process without a tracer still passes the trace on). Costs an AsyncLocalStorage read and an
 * active-span lookup: no allocation when neither is set.
 */
export function currentCausation(): Causation {
  const stored = storage.getStore() ?? none;
  const span = trace.getActiveSpan()?.spanContext();
  if (!span || !trace.isSpanContextValid(span)) return stored;
  return { intent: stored.intent, traceparent: formatTraceparent(span) };
}

/** A span context as a W3C `traceparent` header value. */
export function formatTraceparent(span: SpanContext): string {
  const flags = (span.traceFlags & TraceFlags.SAMPLED).toString(16).padStart(2, '0');
  return `00-${span.traceId}-${span.spanId}-${flags}`;
}

const traceparentPattern = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/**
 * A `traceparent` header value as a remote span context, or null when it is missing or invalid
 * (W3C Trace Context: version ff, an all-zero trace or span id, or a version-00 value with extra
 * fields is refused).
 */
export function parseTraceparent(value: string | null | undefined): SpanContext | null {
  const match = value ? traceparentPattern.exec(value.trim()) : null;
  if (!match) return null;
  const [, version, traceId, spanId, flags, rest] = match as unknown as [
    string,
    string,
    string,
    string,
    string,
    string?,
  ];
  if (version === 'ff' || (version === '00' && rest !== undefined)) return null;
  const context: SpanContext = { traceId, spanId, traceFlags: parseInt(flags, 16), isRemote: true };
  return trace.isSpanContextValid(context) ? context : null;
}

/**
 * The causation a message's headers carry (`causationHeaders`), whatever their value types (AMQP
 * header values may be buffers); parts that are missing or invalid are null.
 */
export function causationFromHeaders(headers: Readonly<Record<string, unknown>> | undefined): Causation {
  if (!headers) return none;
  const text = (name: string): string | null => {
    const value = headers[name] ?? headers[name.toLowerCase()];
    if (typeof value === 'string') return value;
    if (value instanceof Uint8Array) return Buffer.from(value).toString('utf8');
    return null;
  };
  const intent = text(causationHeaders.intent) ?? text('Idem-Intent');
  const traceparent = text(causationHeaders.traceparent) ?? text('Traceparent');
  return {
    intent: intent !== null && parseIntentRef(intent) !== null ? intent : null,
    traceparent: parseTraceparent(traceparent) ? traceparent : null,
  };
}

/**
 * An outbox event's headers as its publisher passes them on: the producer's own (`stored`, which
 * win) over the `traceparent` and `idem-intent` of its causation columns. The columns are not
 * copied into the stored headers when the event is added: each copy made every row ~60–120 bytes
 * wider, written again by the UPDATE that marks it published.
 */
export function withCausationHeaders(
  stored: Record<string, string>,
  intent: unknown,
  traceparent: unknown,
): Record<string, string> {
  const cause = {
    intent: typeof intent === 'string' ? intent : null,
    traceparent: typeof traceparent === 'string' ? traceparent : null,
  };
  if (cause.intent === null && cause.traceparent === null) return stored;
  return { ...headersOf(cause), ...stored };
}

/** The headers of `cause` (only its non-null parts), to merge into a message's. */
export function headersOf(cause: Causation): Record<string, string> {
  const headers: Record<string, string> = {};
  if (cause.traceparent !== null) headers[causationHeaders.traceparent] = cause.traceparent;
  if (cause.intent !== null) headers[causationHeaders.intent] = cause.intent;
  return headers;
}
