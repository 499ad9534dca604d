/**
 * What processing one claimed receipt can come to, and the events the workers report it with.
 */

/**
 * What happened to one claimed receipt: `applied`; `superseded` (state: older than the applied
 * version); `duplicate` (this entity and version were handled already); `waiting` (sequence: an
 * earlier version is missing); `parked` (sequence: waiting past the gap timeout); `deferred` (its
 * entity was busy with another worker); `invalid` (refused by the handler: dead letter);
 * `unhandled`; `retry`; `dead`; `lost` (another worker took the claim over).
 */
export type ProcessOutcome =
  | 'applied'
  | 'superseded'
  | 'duplicate'
  | 'waiting'
  | 'parked'
  | 'deferred'
  | 'invalid'
  | 'unhandled'
  | 'retry'
  | 'dead'
  | 'lost';

/** The receipt an event of the processor is about, and the attempt that ended. */
export interface WebhookReceiptRef {
  /** The tenant of the source that received it (`''`: the default tenant). */
  tenant: string;
  source: string;
  deliveryId: string;
  eventType: string | null;
  /** The handler attempt this claim was (waits for an entity are not counted). */
  attempt: number;
}

/** Why a receipt parked its entity: the version it waits for, and the reason stored with the park. */
export interface ParkedGap {
  expected: string;
  reason: string;
}

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /**
     * A claimed receipt ended without a failure and without an event of its own below: `applied`
     * (its handler's writes committed), `duplicate` (this entity and version, or this delivery,
     * were handled already), `unhandled` (no handler for its type), `waiting` (sequence: an
     * earlier version is missing), `deferred` (its entity was busy with another worker), `parked`
     * (waiting behind an entity parked before), `lost` (another worker took the claim over).
     */
    'webhook:processed': WebhookReceiptRef & {
      outcome: 'applied' | 'duplicate' | 'unhandled' | 'waiting' | 'deferred' | 'parked' | 'lost';
    };
    /** A receipt's handler (or the database) failed; it is retried at `nextAttemptAt` (epoch ms). */
    'webhook:retried': WebhookReceiptRef & { error: string; nextAttemptAt: number };
    /**
     * A receipt became a dead letter: its attempts ran out, its error is not retryable, or the event
     * was refused as invalid (`invalid`: by `validate`, `InvalidWebhookEventError`, or an entity
     * that cannot be ordered). `redrive` brings it back.
     */
    'webhook:dead': WebhookReceiptRef & { error: string; invalid: boolean };
    /** A `state` event older than its entity's applied version: recorded, never handled. */
    'webhook:superseded': WebhookReceiptRef & { entity: { scope: string; key: string; version: string } };
    /**
     * A `sequence` entity was parked: this receipt's version waited past the gap timeout for
     * version `expected`. Once per park; later receipts of the entity wait behind it
     * (`webhook:processed`, outcome `parked`) until the gap is filled or skipped.
     */
    'webhook:parked': WebhookReceiptRef & {
      entity: { scope: string; key: string; version: string };
      expected: string;
      reason: string;
    };
  }
}
