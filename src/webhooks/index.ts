/**
 * idem/webhooks: incoming webhooks verified first, stored as receipts deduplicated on
 * (source, delivery id) before any side effect, answered fast, and processed later by order-aware
 * workers; and a sender that delivers outbox events as signed Standard Webhooks.
 * See docs/webhooks.md.
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
  standardWebhooksVerifier,
  decodeStandardSecret,
  decodeStandardPublicKey,
  type StandardWebhooksOptions,
} from './verify/standard-webhooks.js';
export { githubVerifier, type GithubOptions } from './verify/github.js';
export { stripeVerifier, type StripeOptions } from './verify/stripe.js';
export { hmacVerifier, type HmacOptions, type SignedParts } from './verify/hmac.js';
export { nodeHeaders, fetchHeaders, recordHeaders, type NodeHeaders } from './headers.js';
export { consoleLogger, silentLogger, type WebhookLogger, type LogFields } from './logger.js';
export { problemTypeBase, type WebhookAnswer } from './problem.js';
export {
  WebhookReceiver,
  createWebhookReceiver,
  type WebhookReceiverOptions,
  type WebhookSourceOptions,
  type ResolvedSource,
  type ReceiveOutcome,
} from './receiver.js';
export { readNodeBody, readWebBody } from './raw-body.js';
export { nodeWebhookHandler, sendNodeAnswer } from './node-http.js';
export { expressWebhook, type ExpressWebhookOptions } from './express.js';
export { fastifyWebhooks, fastifyWebhookHandler, type FastifyWebhooksOptions } from './fastify.js';
export { honoWebhook } from './hono.js';
export type { WebhookEvent } from './event.js';
export {
  createBackoff,
  resolveBackoff,
  type BackoffOptions,
  type Jitter,
} from '../core/resilience/backoff.js';
export {
  WebhookProcessor,
  createWebhookProcessor,
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
} from './processor.js';
export {
  listParkedEntities,
  skipEntityGap,
  type ParkedEntity,
  type ListParkedOptions,
  type SkipOptions,
  type SkipResult,
} from './entities.js';
export { discardReceipt, type DiscardOptions, type DiscardResult } from './discard.js';
export {
  WebhookSender,
  createWebhookSender,
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
export { WebhookEndpoints, type WebhookEndpoint, type NewWebhookEndpoint } from './sender/endpoints.js';
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
export { parseRetryAfter } from '../core/resilience/retry-after.js';
export { webhookPublisher, type WebhookPublisherOptions } from './sender/outbox-publisher.js';
export type { RetentionSweepOptions, SweepOptions, SweepResult } from '../core/sweeper.js';
export { sweepReceipts, type ReceiptSweepOptions } from './sweep.js';
