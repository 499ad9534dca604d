/**
 * idem/inbox: processed-message records for consumers, in the handler's own transaction, and
 * consumers for RabbitMQ and NATS JetStream that ack only after the commit.
 */
export {
  Inbox,
  createInbox,
  type DeadMessage,
  type HandleResult,
  type InboxContext,
  type InboxCounters,
  type InboxMessage,
  type InboxOptions,
  type InboxRecord,
} from './inbox.js';
export {
  RabbitMqConsumer,
  consumeRabbitMq,
  attemptsHeader,
  type AmqpReceivedMessage,
  type ConsumerCounters,
  type RabbitMqConsumerOptions,
} from './rabbitmq-consumer.js';
export {
  JetStreamConsumer,
  consumeJetStream,
  type JetStreamConsumerOptions,
  type JetStreamReceivedMessage,
} from './jetstream-consumer.js';
export { MessageWithoutIdError, defaultRetryDelaysMs, type ConsumerRetryOptions } from './retry.js';
export type { RetentionSweepOptions, SweepOptions, SweepResult } from '../core/sweeper.js';
