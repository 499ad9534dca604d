/**
 * SQS batches on the inbox: each message runs its handler once per id, in a transaction that also
 * records the id (`inbox.handle`), and the function answers a partial batch response naming the
 * messages that failed, so SQS redelivers only those. A redelivered message whose id is recorded
 * (a failed batch retried whole, a visibility timeout that ran out, a producer's duplicate, the
 * same id twice in one batch) is skipped: its effect is never repeated.
 */
import { InvalidArgumentError, type IdemEvents, type Transaction } from '../index.js';
import { MessageWithoutIdError, type Inbox, type InboxContext } from '../inbox/index.js';
import { messageIdOf } from './event-key.js';
import { boundsOf, boundTransactionBy } from './deadline.js';
import { defaultReserveMs } from './options.js';
import { compilePath } from './path.js';
import type { LambdaContext, SqsBatchResponse, SqsEvent, SqsRecord } from './types.js';

/** What a message's handler gets beside its transaction and record. */
export interface SqsMessageContext extends InboxContext {
  /** The invocation's context (undefined when the handler was called without one). */
  lambda: LambdaContext | undefined;
}

/** Options of `createSqsBatchHandler`. */
export interface SqsBatchOptions<Client = unknown, Record extends SqsRecord = SqsRecord> {
  /** The inbox the message ids are recorded in, from `createInbox` (its pool made outside the handler). Required. */
  inbox: Inbox<Client>;
  /** The consuming component, e.g. `billing`: each consumer of a message processes it once. Required. */
  consumer: string;
  /**
   * Runs once per message id, in the transaction that records the id: write the message's effects
   * through `tx`. A throw rolls them back and fails that message alone (it is named in
   * `batchItemFailures`, and SQS redelivers it). Required.
   */
  handler: (tx: Transaction<Client>, record: Record, context: SqsMessageContext) => Promise<void>;
  /**
   * Where a message's id is: a path on the record (`'powertools_json(body).eventId'`,
   * `'messageAttributes."event-id".stringValue'`) or a function of it. Default: SQS's
   * `messageId`, which is the same on every redelivery of one message; a producer that sends one
   * intent twice (an outbox relay after a crash) sends two messageIds, so name the producer's id
   * here. A string of up to 512 characters is the id as it is, anything else its SHA-256. A
   * message without an id fails (`MessageWithoutIdError`) and ends in the queue's dead-letter queue.
   */
  messageId?: string | ((record: Record) => unknown);
  /** The tenant of a message, for an inbox shared by tenants. Default: the inbox's `tenant`. */
  tenant?: (record: Record) => string | undefined;
  /**
   * Time kept back from the invocation's deadline, in ms: a message not started when
   * `context.getRemainingTimeInMillis()` is below it is reported failed, not started, so the
   * function answers before it times out (a timeout redelivers the whole batch). Default 500.
   */
  reserveMs?: number;
  /**
   * Whether each message's transaction is bounded by the invocation's deadline, as in
   * `idempotency({ boundByDeadline })`: `statement_timeout` set to the remaining time less
   * `reserveMs` and `idle_in_transaction_session_timeout` to the remaining time, both `SET LOCAL`.
   * A handler stuck behind a lock then fails (that message alone is redelivered) while the
   * function can still answer for the rest of the batch. One round trip per message. Default true.
   */
  boundByDeadline?: boolean;
  /**
   * How many messages of a standard queue are handled at once, each on its own connection.
   * Default 1. A FIFO queue's batch (its `eventSourceARN` ends in `.fifo`, or its records carry a
   * `MessageGroupId`) is always handled in order, one at a time, and stops at its first failure:
   * that message and every later one are reported failed, so the order is kept.
   */
  concurrency?: number;
  /**
   * Where a failed message is reported, as an `error` event (source `sqs`, where `handler`, or
   * `message-id` when its id could not be read). Default: the inbox's channel, where an `error`
   * nobody listens to is one line on stderr (in CloudWatch Logs).
   */
  events?: IdemEvents;
}

/** The function to export as the handler of an SQS event source mapping. */
export type SqsBatchHandler<Record extends SqsRecord = SqsRecord> = (
  event: SqsEvent<Record>,
  context?: LambdaContext,
) => Promise<SqsBatchResponse>;

/**
 * A Lambda handler for SQS batches that applies each message once, with partial batch responses.
 * Turn on `ReportBatchItemFailures` in the event source mapping's `FunctionResponseTypes`: without
 * it SQS ignores the answer. It starts nothing (no timer, no connection until a batch comes).
 *
 * @example
 * const inbox = createInbox({ sql: fromPg(pool, { prepare: false }) });
 * export const handler = createSqsBatchHandler({
 *   inbox,
 *   consumer: 'billing',
 *   handler: async (tx, record) => {
 *     const order = JSON.parse(record.body) as { id: string; total: number };
 *     await tx.query('INSERT INTO invoices (order_id, total) VALUES ($1, $2)', [order.id, order.total]);
 *   },
 * });
 */
export function createSqsBatchHandler<Client = unknown, Record extends SqsRecord = SqsRecord>(
  options: SqsBatchOptions<Client, Record>,
): SqsBatchHandler<Record> {
  if (!options || typeof options.inbox?.handle !== 'function') {
    throw new InvalidArgumentError('createSqsBatchHandler needs `inbox` (from createInbox)');
  }
  if (typeof options.handler !== 'function')
    throw new InvalidArgumentError('createSqsBatchHandler needs `handler`');
  if (typeof options.consumer !== 'string' || options.consumer === '') {
    throw new InvalidArgumentError(
      'createSqsBatchHandler needs `consumer`, the name of the consuming component',
    );
  }
  const reserveMs = options.reserveMs ?? defaultReserveMs;
  if (!(Number.isFinite(reserveMs) && reserveMs >= 0))
    throw new InvalidArgumentError('reserveMs must be zero or more');
  const concurrency = options.concurrency ?? 1;
  if (!(Number.isInteger(concurrency) && concurrency >= 1)) {
    throw new InvalidArgumentError('concurrency must be a positive integer');
  }
  const boundByDeadline = options.boundByDeadline ?? true;
  if (typeof boundByDeadline !== 'boolean')
    throw new InvalidArgumentError('boundByDeadline must be true or false');
  const { inbox, consumer, handler } = options;
  const events = options.events ?? inbox.events;
  const selectId: (record: Record) => unknown =
    options.messageId === undefined
      ? (record) => record.messageId
      : typeof options.messageId === 'function'
        ? options.messageId
        : compilePath(options.messageId, 'messageId');
  const report = (where: string, error: unknown) => events.emit('error', { source: 'sqs', where, error });

  /** Handles one message; true when it is done (processed now or before). */
  const handleOne = async (record: Record, lambda: LambdaContext | undefined): Promise<boolean> => {
    let messageId: string | undefined;
    try {
      messageId = messageIdOf(selectId(record));
    } catch (error) {
      report('message-id', error);
      return false;
    }
    if (messageId === undefined) {
      report('message-id', new MessageWithoutIdError(record.eventSourceARN ?? 'sqs'));
      return false;
    }
    try {
      const tenant = options.tenant?.(record);
      await inbox.handle(
        { consumer, messageId, ...(tenant === undefined ? {} : { tenant }) },
        async (tx, context) => {
          const bounds = boundByDeadline ? boundsOf(lambda, reserveMs) : undefined;
          if (bounds) await boundTransactionBy(tx, bounds);
          return handler(tx, record, { ...context, lambda });
        },
      );
      return true;
    } catch (error) {
      report('handler', error);
      return false;
    }
  };

  return async (event, lambda) => {
    if (!event || !Array.isArray(event.Records)) {
      throw new InvalidArgumentError(
        'createSqsBatchHandler received an event without Records: is it an SQS event?',
      );
    }
    const records = event.Records;
    const outOfTime = () => {
      const remaining =
        typeof lambda?.getRemainingTimeInMillis === 'function' ? lambda.getRemainingTimeInMillis() : Infinity;
      return remaining < reserveMs;
    };
    const done: boolean[] = records.map(() => false);
    if (records.some(isFifo)) {
      for (let i = 0; i < records.length; i++) {
        if (outOfTime() || !(done[i] = await handleOne(records[i]!, lambda))) break;
      }
    } else {
      let next = 0;
      const worker = async () => {
        for (let i = next++; i < records.length; i = next++) {
          if (!outOfTime()) done[i] = await handleOne(records[i]!, lambda);
        }
      };
      await Promise.all(Array.from({ length: Math.min(concurrency, records.length) }, worker));
    }
    // One entry per failed message (the same message twice in a batch is named once).
    const failed = new Set(records.filter((_, i) => !done[i]).map((record) => record.messageId));
    return { batchItemFailures: [...failed].map((itemIdentifier) => ({ itemIdentifier })) };
  };
}

function isFifo(record: SqsRecord): boolean {
  return (
    (record.eventSourceARN?.endsWith('.fifo') ?? false) || record.attributes?.MessageGroupId !== undefined
  );
}
