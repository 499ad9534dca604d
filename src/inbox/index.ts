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
