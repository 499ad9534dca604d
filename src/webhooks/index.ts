/**
 * idem/webhooks: incoming webhooks verified first, stored as receipts deduplicated on
 * (source, delivery id) before any side effect, answered fast, and processed later by order-aware
 * workers; and a sender that delivers outbox events as signed Standard Webhooks.
 * See docs/guide/webhooks.md.
 */
export {
  WebhookUnauthorizedError,
  WebhookMalformedError,
  WebhookBodyTooLargeError,
  RawBodyUnavailableError,
  isWebhookUnauthorized,
  isWebhookMalformed,
  isWebhookBodyTooLarge,
  isRawBodyUnavailable,
  isWebhookRequestError,
  InvalidWebhookEventError,
  isInvalidWebhookEvent,
  type UnauthorizedReason,
  type WebhookRequestError,
} from './errors.js';
export type {
  WebhookVerifier,
  WebhookRequest,
  WebhookHeaders,
  VerifiedDelivery,
  ToleranceOptions,
  Secret,
} from './verify/types.js';
export { safeEqual, type SignatureEncoding } from './verify/common.js';
export {
  createStandardWebhooksVerifier,
  decodeStandardSecret,
  decodeStandardPublicKey,
  type StandardWebhooksOptions,
} from './verify/standard-webhooks.js';
export { createGithubVerifier, type GithubOptions } from './verify/github.js';
export { createStripeVerifier, type StripeOptions } from './verify/stripe.js';
export { createHmacVerifier, type HmacOptions, type SignedParts } from './verify/hmac.js';
export { nodeHeaders, fetchHeaders, recordHeaders, type NodeHeaders } from './headers.js';
export type { WebhookAnswer } from './problem.js';
export {
  createWebhookReceiver,
  type WebhookReceiver,
  type WebhookReceiverOptions,
  type WebhookSourceOptions,
  type ResolvedSource,
  type ReceiveOutcome,
  type WebhookRejectionReason,
  type WebhookRouteOptions,
} from './receiver.js';
export type { WebhookEvent } from './event.js';
export type { BackoffOptions, Jitter } from '../core/resilience/backoff.js';
export {
  createWebhookProcessor,
  type WebhookProcessor,
  processorBackoff,
  normaliseEntity,
  type EntityVersion,
  type WebhookOrdering,
  type WebhookHandler,
  type WebhookHandlers,
  type WebhookProcessorOptions,
  type ProcessOutcome,
  type WebhookReceipt,
  type RedriveOptions,
  type WebhookReceiptRef,
} from './processor.js';
export type { ParkedEntity, ListParkedOptions, SkipOptions, SkipResult } from './entities.js';
export type { DiscardOptions, DiscardResult } from './discard.js';
export {
  createWebhookSender,
  type WebhookSender,
  standardRetrySchedule,
  senderBackoff,
  defaultMessagesRetentionMs,
  type WebhookMessage,
  type WebhookSenderOptions,
  type AttemptOutcome,
  type AttemptResult,
  type WebhookDelivery,
  type WebhookDeliveryAttempt,
} from './sender/sender.js';
export type { WebhookDeliveryRef } from './sender/attempt.js';
export type { WebhookEndpoints, WebhookEndpoint, NewWebhookEndpoint } from './sender/endpoints.js';
export {
  DestinationRefusedError,
  isDestinationRefused,
  refusedKind,
  type RefusedKind,
  type LookupFunction,
} from './sender/destination.js';
export {
  signatureHeader,
  parseSigningSecret,
  generateWebhookSecret,
  generateWebhookKeyPair,
  type SigningKey,
} from './sender/sign.js';
export { createWebhookPublisher, type WebhookPublisherOptions } from './sender/outbox-publisher.js';
export type { RetentionSweepOptions, SweepOptions, SweepResult } from '../core/sweeper.js';
export type { ReceiptSweepOptions } from './sweep.js';
