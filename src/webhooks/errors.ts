/**
 * Typed errors of the webhook receiver. Their messages never carry a header value, a signature or a
 * secret: they name what is wrong, never what was sent, so they are safe in logs and error bodies.
 */
import { IdemError, isIdemError } from '../core/errors.js';

/** Why a delivery was refused with 401. */
export type UnauthorizedReason =
  /** The signature header is absent. */
  | 'signature-missing'
  /** Signatures are present but none is of a scheme or version this verifier accepts. */
  | 'signature-unsupported'
  /** No signature matches any configured secret or key. */
  | 'signature-mismatch'
  /** The signed timestamp is older than the tolerance allows. */
  | 'timestamp-too-old'
  /** The signed timestamp is further in the future than the tolerance allows. */
  | 'timestamp-too-new';

/** The delivery is not authentic, or its signed timestamp is outside the tolerance (HTTP 401). */
export class WebhookUnauthorizedError extends IdemError {
  declare readonly code: 'IDEM_WEBHOOK_UNAUTHORIZED';
  readonly status = 401;
  constructor(readonly reason: UnauthorizedReason) {
    super('IDEM_WEBHOOK_UNAUTHORIZED', messages[reason]);
  }
}

const messages: Record<UnauthorizedReason, string> = {
  'signature-missing': 'the webhook signature header is missing',
  'signature-unsupported': 'the webhook carries no signature of a supported scheme',
  'signature-mismatch': 'no webhook signature matches a configured secret',
  'timestamp-too-old': 'the webhook timestamp is older than the tolerance allows',
  'timestamp-too-new': 'the webhook timestamp is further in the future than the tolerance allows',
};

/** A required header is missing or does not parse, or the body lacks the delivery id (HTTP 400). */
export class WebhookMalformedError extends IdemError {
  declare readonly code: 'IDEM_WEBHOOK_MALFORMED';
  readonly status = 400;
  /** @param message names the header or field, never its value. */
  constructor(message: string) {
    super('IDEM_WEBHOOK_MALFORMED', message);
  }
}

/** The body is larger than the configured limit (HTTP 413). Nothing was stored. */
export class WebhookBodyTooLargeError extends IdemError {
  declare readonly code: 'IDEM_WEBHOOK_TOO_LARGE';
  readonly status = 413;
  constructor(readonly limit: number) {
    super('IDEM_WEBHOOK_TOO_LARGE', `the webhook body is larger than the limit of ${limit} bytes`);
  }
}

/**
 * A body parser consumed or re-serialised the body before the webhook route saw it, so the exact
 * bytes that were signed are gone. This is a configuration error of the application (HTTP 500):
 * mount the webhook route before JSON/text body parsers, or give it the raw bytes.
 */
export class RawBodyUnavailableError extends IdemError {
  declare readonly code: 'IDEM_WEBHOOK_RAW_BODY';
  readonly status = 500;
  constructor(message: string) {
    super('IDEM_WEBHOOK_RAW_BODY', message);
  }
}

/**
 * Thrown by a handler (or produced by its `validate`) to refuse an authentic event that must never
 * take effect: a negative amount, more than is left to refund, an entity this service must not
 * touch. The processor rolls the handler's transaction back and dead-letters the receipt with the
 * reason at once: never retried, never applied. Redriving it runs the checks again.
 */
export class InvalidWebhookEventError extends IdemError {
  declare readonly code: 'IDEM_WEBHOOK_EVENT_INVALID';
  /** @param reason why, in words an operator reads in the dead letter (no secret, no full body). */
  constructor(readonly reason: string) {
    super('IDEM_WEBHOOK_EVENT_INVALID', `invalid event: ${reason}`, { retryable: false });
  }
}

/**
 * True for an `InvalidWebhookEventError`: a handler refused an event for good (a dead letter).
 *
 * @example
 * if (isInvalidWebhookEvent(receipt.error)) log.warn('refused for good', receipt.deliveryId);
 */
export const isInvalidWebhookEvent = (e: unknown): e is InvalidWebhookEventError =>
  isIdemError(e) && e.code === 'IDEM_WEBHOOK_EVENT_INVALID';

/** Any error the receiver answers with its own status. */
export type WebhookRequestError =
  WebhookUnauthorizedError | WebhookMalformedError | WebhookBodyTooLargeError | RawBodyUnavailableError;

/**
 * True for a `WebhookUnauthorizedError`: the signature did not verify (answered 401).
 *
 * @example
 * if (isWebhookUnauthorized(error)) metrics.badSignatures.inc({ source });
 */
export const isWebhookUnauthorized = (e: unknown): e is WebhookUnauthorizedError =>
  isIdemError(e) && e.code === 'IDEM_WEBHOOK_UNAUTHORIZED';
/**
 * True for a `WebhookMalformedError`: a verified request without what a receipt needs (answered 400).
 *
 * @example
 * if (isWebhookMalformed(error)) return reply.code(400).send(error.message);
 */
export const isWebhookMalformed = (e: unknown): e is WebhookMalformedError =>
  isIdemError(e) && e.code === 'IDEM_WEBHOOK_MALFORMED';
/**
 * True for a `WebhookBodyTooLargeError`: the body passed the source's `maxBodyBytes` (answered 413).
 *
 * @example
 * if (isWebhookBodyTooLarge(error)) return reply.code(413).end();
 */
export const isWebhookBodyTooLarge = (e: unknown): e is WebhookBodyTooLargeError =>
  isIdemError(e) && e.code === 'IDEM_WEBHOOK_TOO_LARGE';
/**
 * True for a `RawBodyUnavailableError`: a body parser consumed the bytes before the receiver
 * could verify them (answered 500: mount the receiver before the parser).
 *
 * @example
 * if (isRawBodyUnavailable(error)) log.error('mount the webhook route before express.json()');
 */
export const isRawBodyUnavailable = (e: unknown): e is RawBodyUnavailableError =>
  isIdemError(e) && e.code === 'IDEM_WEBHOOK_RAW_BODY';

/**
 * True for the errors the receiver maps to 400, 401, 413 or 500 itself.
 *
 * @example
 * const outcome = await receiver.receive(source, request).catch((error: unknown) => {
 *   if (isWebhookRequestError(error)) return null; // already answered with its status
 *   throw error;
 * });
 */
export function isWebhookRequestError(e: unknown): e is WebhookRequestError {
  return (
    isWebhookUnauthorized(e) || isWebhookMalformed(e) || isWebhookBodyTooLarge(e) || isRawBodyUnavailable(e)
  );
}
