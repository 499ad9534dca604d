/**
 * idem/outbox: events written in the business transaction, a dispatcher that publishes them in
 * per-key order, and publishers for RabbitMQ, NATS JetStream and the in-database transport.
 */
export type {
  JsonValue,
  NewOutboxEvent,
  OutboxEvent,
  Publisher,
  PublishFailure,
  PublishResult,
  PublishSuccess,
} from './types.js';
export {
  createOutbox,
  type Outbox,
  defaultPublishedRetentionMs,
  type OutboxSweepOptions,
  type OutboxOptions,
  type OutboxRecord,
  type OutboxStats,
  type RedriveFilter,
  type RedriveResult,
} from './outbox.js';
export { createOutboxDispatcher, type OutboxDispatcher, type BatchResult } from './dispatcher.js';
export { type DispatcherOptions, dispatcherBackoff } from './dispatcher-options.js';
export type { Backoff, BackoffOptions, Jitter } from '../core/resilience/backoff.js';
export { PublishError, isPublishError, describeError } from './errors.js';
export type { ListenClient, ListenConnectionConfig, ListenSource } from './listener.js';
export { ListenerDeafError, isListenerDeaf } from './listener.js';
export { outboxChannel } from './statements.js';
export {
  createRabbitMqPublisher,
  type RabbitMqPublisher,
  type AmqpRoute,
  type RabbitMqPublisherOptions,
} from './publishers/rabbitmq.js';
export { createNatsPublisher, type NatsPublisher, type NatsPublisherOptions } from './publishers/nats.js';
export {
  createInDatabasePublisher,
  type InDatabasePublisher,
  type EventHandler,
  type InDatabasePublisherOptions,
  type Subscriber,
} from './publishers/in-database.js';
export type { RetentionSweepOptions, SweepOptions, SweepResult } from '../core/sweeper.js';
