/** The shapes every verifier shares. One file per scheme sits beside this one. */

/** Case-insensitive header lookup; `name` is always lower-case. */
export interface WebhookHeaders {
  get(name: string): string | undefined;
}

/** What a verifier sees: the headers and the exact bytes received. */
export interface WebhookRequest {
  headers: WebhookHeaders;
  body: Uint8Array;
}

/** What a verifier returns once the delivery is authentic. */
export interface VerifiedDelivery {
  /** The dedupe key within the source: a redelivery carries the same one. */
  deliveryId: string;
  /** The event type when the sender names one; `null` otherwise (stored and acknowledged). */
  eventType: string | null;
  /** The signed timestamp in epoch milliseconds, when the scheme signs one. */
  signedAt: number | null;
}

/**
 * Checks one scheme's signature over the exact bytes. Throws `WebhookUnauthorizedError` (401) or
 * `WebhookMalformedError` (400); never includes a header value or a secret in what it throws.
 */
export interface WebhookVerifier {
  /** The scheme's name, e.g. `standard-webhooks`. */
  readonly scheme: string;
  /** How long receipts of this scheme are kept by default: the sender's redelivery window plus margin. */
  readonly retentionMs: number;
  /** Headers stored with the receipt by default (lower-case). */
  readonly storedHeaders: readonly string[];
  /** Headers that carry signatures: never stored, never logged. */
  readonly signatureHeaders: readonly string[];
  /** @param now epoch milliseconds of the receiver's clock. */
  verify(request: WebhookRequest, now: number): VerifiedDelivery;
}

/** A timestamp tolerance, applied to the past and to the future. */
export interface ToleranceOptions {
  /**
   * How far the signed timestamp may lie in the past, in seconds. Default 300 (the value Stripe and
   * Standard Webhooks use). Longer admits older replays of a captured request; the dedupe table
   * stops a replay's second effect anyway, but not its storage cost.
   */
  toleranceSeconds?: number;
  /**
   * How far the signed timestamp may lie in the future, in seconds, to absorb clock skew.
   * Default: `toleranceSeconds`.
   */
  futureToleranceSeconds?: number;
}

/** A secret given as text or bytes. How text is decoded depends on the scheme. */
export type Secret = string | Uint8Array;
