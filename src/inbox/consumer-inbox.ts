/**
 * What the broker consumers (RabbitMQ, NATS JetStream) do with the inbox, written once: run a
 * message's handler once per id in the inbox's transaction, record a message given up on as dead,
 * and report what happened and the errors a consumer survives.
 */
import type { IdemEventMap, IdemEvents } from '../core/event-channel.js';
import type { Transaction } from '../core/sql.js';
import type { Inbox, InboxContext } from './inbox.js';

/** A message given up on, as its inbox record keeps it. */
export interface DeadDelivery {
  attempts: number;
  /** `describeError` of the last failure. */
  error: string;
  /** Where it came from: the queue, or `<stream>/<subject>`. */
  origin: string;
  payload: Uint8Array;
  headers: Record<string, string>;
}

export class ConsumerInbox<Client, Message> {
  private readonly events: IdemEvents;

  /** `source` names the consumer in `error` events: `rabbitmq-consumer`, `jetstream-consumer`. */
  constructor(
    private readonly options: {
      inbox: Inbox<Client>;
      consumer: string;
      handler: (tx: Transaction<Client>, message: Message, context: InboxContext) => Promise<void>;
      /** Default: the inbox's channel. */
      events?: IdemEvents;
      /** Record dead messages in the inbox. */
      recordDead: boolean;
    },
    private readonly source: string,
  ) {
    this.events = options.events ?? options.inbox.events;
  }

  /**
   * Runs the handler once per message id (the inbox reports `inbox:processed` or
   * `inbox:duplicate`); resolves once committed, or once found processed before.
   */
  async handle(
    messageId: string,
    tenant: string | undefined,
    message: Message,
    headers: Readonly<Record<string, unknown>>,
  ): Promise<void> {
    // The headers carry the producer's intent and trace (`traceparent`, `idem-intent`).
    await this.options.inbox.handle({ ...this.key(messageId, tenant), headers }, (tx, context) =>
      this.options.handler(tx, message, context),
    );
  }

  /** Records a message given up on as dead (unless `recordDead` is off). */
  async markDead(messageId: string, tenant: string | undefined, dead: DeadDelivery): Promise<void> {
    if (this.options.recordDead)
      await this.options.inbox.markDead({ ...this.key(messageId, tenant), ...dead });
  }

  /** Reports a delivery sent back for a later redelivery (after the broker took it). */
  retried(delivery: Omit<IdemEventMap['inbox:retried'], 'consumer'>): void {
    this.events.emit('inbox:retried', { consumer: this.options.consumer, ...delivery });
  }

  /** Reports a delivery given up on (after the broker took it). */
  dead(delivery: Omit<IdemEventMap['inbox:dead'], 'consumer'>): void {
    this.events.emit('inbox:dead', { consumer: this.options.consumer, ...delivery });
  }

  /** Reports an error the consumer survives, as an `error` event (stderr when nobody listens). */
  report(error: unknown, where: string): void {
    this.events.emit('error', { source: this.source, where, error });
  }

  private key(messageId: string, tenant: string | undefined) {
    return { consumer: this.options.consumer, messageId, ...(tenant === undefined ? {} : { tenant }) };
  }
}

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /**
     * A broker consumer (RabbitMQ, JetStream) sent a failed delivery back for a redelivery in
     * `retryInMs`, once the broker took it (the retry queue's confirm and the ack; JetStream's
     * `nak`).
     */
    'inbox:retried': {
      consumer: string;
      messageId: string;
      /** The delivery's tenant, when it names one (else it is the inbox's `tenant`). */
      tenant?: string;
      /** The delivery that failed: 1 on the first. */
      attempt: number;
      /** The wait before the redelivery, in ms. */
      retryInMs: number;
      /** `describeError` of the failure. */
      error: string;
      /** The database, not the message, failed: the redelivery spends no attempt. */
      outage: boolean;
    };
    /**
     * A broker consumer gave up on a delivery (its `maxAttempts` spent, a failure that says
     * `retryable: false`, or a RabbitMQ message without an id): dead-lettered (RabbitMQ's
     * dead-letter queue, JetStream's `term`), and recorded in the inbox unless `recordDead` is off.
     */
    'inbox:dead': {
      consumer: string;
      /** The message's id; null for a RabbitMQ delivery that had none (`MessageWithoutIdError`). */
      messageId: string | null;
      /** The delivery's tenant, when it names one (else it is the inbox's `tenant`). */
      tenant?: string;
      /** Deliveries attempted, this one included. */
      attempts: number;
      /** `describeError` of the last failure. */
      error: string;
      /** Where it came from: the queue, or `<stream>/<subject>`. */
      origin: string;
    };
  }
}
