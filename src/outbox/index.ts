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
  Outbox,
  createOutbox,
  defaultPublishedRetentionMs,
  type CleanupOptions,
  type OutboxSweepOptions,
  type OutboxOptions,
  type OutboxRecord,
  type OutboxStats,
  type RedriveFilter,
  type RedriveResult,
} from './outbox.js';
export {
  OutboxDispatcher,
  createDispatcher,
  type BatchResult,
  type DispatcherCounters,
  type DispatcherOptions,
  dispatcherBackoff,
} from './dispatcher.js';
export {
  createBackoff,
  resolveBackoff,
  type Backoff,
  type BackoffOptions,
  type Jitter,
} from '../core/resilience/backoff.js';
export { PublishError, isPublishError, describeError } from './errors.js';
export type { ListenClient, ListenConnectionConfig, ListenSource } from './listener.js';
export { ListenerDeafError } from './listener.js';
export { outboxChannel } from './statements.js';
export {
  RabbitMqPublisher,
  rabbitMqPublisher,
  type AmqpRoute,
  type RabbitMqPublisherOptions,
} from './publishers/rabbitmq.js';
export { NatsPublisher, natsPublisher, type NatsPublisherOptions } from './publishers/nats.js';
export {
  InDatabasePublisher,
  inDatabasePublisher,
  type EventHandler,
  type InDatabasePublisherOptions,
  type Subscriber,
} from './publishers/in-database.js';
export type { RetentionSweepOptions, SweepOptions, SweepResult } from '../core/sweeper.js';
