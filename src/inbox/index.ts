/**
 * idem/inbox: processed-message records for consumers, in the handler's own transaction, and
 * consumers for RabbitMQ and NATS JetStream that ack only after the commit.
 */
export {
  createInbox,
  type Inbox,
  type DeadMessage,
  type HandleResult,
  type InboxContext,
  type InboxMessage,
  type InboxOptions,
  type InboxRecord,
} from './inbox.js';
export {
  createRabbitMqConsumer,
  type RabbitMqConsumer,
  attemptsHeader,
  type AmqpReceivedMessage,
  type RabbitMqConsumerOptions,
} from './rabbitmq-consumer.js';
export {
  createJetStreamConsumer,
  type JetStreamConsumer,
  type JetStreamConsumerOptions,
  type JetStreamReceivedMessage,
} from './jetstream-consumer.js';
export {
  MessageWithoutIdError,
  isMessageWithoutId,
  defaultRetryDelaysMs,
  type ConsumerRetryOptions,
} from './retry.js';
export type { RetentionSweepOptions, SweepOptions, SweepResult } from '../core/sweeper.js';
