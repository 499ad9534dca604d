/**
 * RabbitMQ consumer with an inbox: manual ack only after the handler's transaction committed, a
 * bounded prefetch, delayed redelivery through per-delay retry queues (TTL + dead-letter back to
 * the main queue, so a waiting message never blocks the queue), and a dead-letter queue with the
 * reason after N attempts.
 */
import type { ChannelModel, ConfirmChannel, ConsumeMessage, Options } from 'amqplib';
import { isDatabaseOutage } from '../core/failures.js';
import type { Transaction } from '../core/sql.js';
import { describeError } from '../core/describe-error.js';
import { connectAmqp } from '../brokers/amqp-connect.js';
import type { AmqpChannelModel, AmqpConsumeMessage } from '../brokers/amqp-types.js';
import type { IdemEvents } from '../core/event-channel.js';
import { ConsumerInbox } from './consumer-inbox.js';
import type { Inbox, InboxContext } from './inbox.js';
import {
  MessageWithoutIdError,
  resolveRetry,
  type ConsumerRetryOptions,
  type ResolvedRetry,
} from './retry.js';

/** A delivery as the handler sees it. */
export interface AmqpReceivedMessage {
  /** AMQP `message_id` (the outbox event id). */
  id: string;
  body: Buffer;
  /** The body parsed as JSON. */
  json<T = unknown>(): T;
  type: string | undefined;
  headers: Record<string, unknown>;
  /** 1 on the first delivery, counting redeliveries through the retry queues. */
  attempt: number;
  /** The broker's flag: delivered before without an ack (e.g. the previous consumer crashed). */
  redelivered: boolean;
  raw: AmqpConsumeMessage;
}

export interface RabbitMqConsumerOptions<Client = unknown> extends ConsumerRetryOptions {
  inbox: Inbox<Client>;
  /** The inbox consumer name, e.g. `billing`. */
  consumer: string;
  queue: string;
  /** An AMQP URL, or a factory returning a connected amqplib `ChannelModel`. The consumer closes it. */
  connection: string | (() => Promise<AmqpChannelModel>);
  /** Runs in the inbox transaction; throw to fail the delivery. */
  handler: (tx: Transaction<Client>, message: AmqpReceivedMessage, context: InboxContext) => Promise<void>;
  /** Unacked deliveries at once, which is also how many handlers run concurrently. Default 16. */
  prefetch?: number;
  /**
   * Declare the main queue (durable, no arguments). Turn off when it exists with other arguments
   * (quorum, its own dead-lettering). The retry and dead-letter queues are always declared.
   * Default true.
   */
  assertQueue?: boolean;
  /** Default `<queue>.dead`. */
  deadLetterQueue?: string;
  /**
   * Where the consumer reports: `inbox:retried` and `inbox:dead` for the deliveries it sent back
   * or gave up on, and the errors it survives (connection loss, failed acks) as `error` events
   * with source `rabbitmq-consumer`. (`inbox:processed` and `inbox:duplicate` come from the
   * inbox.) Default: the inbox's channel (`inbox.events`).
   */
  events?: IdemEvents;
  /**
   * The tenant of a delivery, for its inbox record. Default: the `idem-tenant` header (idem's
   * RabbitMQ publisher sets it for events of a named tenant), else the inbox's `tenant`.
   */
  tenant?: (message: AmqpReceivedMessage) => string | undefined;
}

/** Header carrying the number of failed deliveries so far. */
export const attemptsHeader = 'x-idem-attempts';
/** Deliveries that met a database outage: they spend no attempt, and space the redeliveries out. */
export const outagesHeader = 'x-idem-outages';

/**
 * @example
 * const consumer = createRabbitMqConsumer({
 *   inbox, consumer: 'billing', queue: 'orders', connection: process.env.AMQP_URL,
 *   handler: async (tx, message) => { await tx.query('INSERT INTO invoices …', [message.json()]) },
 * });
 * await consumer.start();
 * // on shutdown:
 * await consumer.stop();
 */
export class RabbitMqConsumer<Client = unknown> {
  private readonly retry: ResolvedRetry;
  private readonly inbox: ConsumerInbox<Client, AmqpReceivedMessage>;
  private readonly deadLetterQueue: string;
  private model: ChannelModel | undefined;
  private channel: ConfirmChannel | undefined;
  private consumerTag: string | undefined;
  private closing = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private reconnects = 0;
  private readonly inflight = new Set<Promise<void>>();

  constructor(private readonly options: RabbitMqConsumerOptions<Client>) {
    this.retry = resolveRetry(options);
    this.deadLetterQueue = options.deadLetterQueue ?? `${options.queue}.dead`;
    this.inbox = new ConsumerInbox({ ...options, recordDead: this.retry.recordDead }, 'rabbitmq-consumer');
  }

  /** Name of the retry queue for a delay. */
  retryQueue(delayMs: number): string {
    return `${this.options.queue}.retry.${delayMs}`;
  }

  /** Every queue this consumer declares, for cleanup. */
  get queues(): string[] {
    return [
      this.options.queue,
      this.deadLetterQueue,
      ...new Set(this.retry.retryDelaysMs.map((d) => this.retryQueue(d))),
    ];
  }

  /** Connects, declares the queues, and starts consuming. Rejects if the first connection fails. */
  async start(): Promise<void> {
    this.closing = false;
    await this.connect();
  }

  /** Stops consuming, lets running handlers finish (and ack), and closes the connection. */
  async stop(): Promise<void> {
    this.closing = true;
    clearTimeout(this.reconnectTimer);
    // No new deliveries; the running ones finish and ack on the open channel.
    if (this.channel && this.consumerTag) await this.channel.cancel(this.consumerTag).catch(() => undefined);
    await Promise.allSettled([...this.inflight]);
    const model = this.model;
    this.model = undefined;
    this.channel = undefined;
    await model?.close().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    const model = await connectAmqp(this.options.connection);
    this.model = model;
    model.on('error', (error: unknown) => this.inbox.report(error, 'connection'));
    model.on('close', () => this.lost(model));
    const channel = await model.createConfirmChannel();
    channel.on('error', (error: unknown) => this.inbox.report(error, 'channel'));
    channel.on('close', () => this.lost(model));
    await channel.prefetch(this.options.prefetch ?? 16);
    await this.declare(channel);
    this.channel = channel;
    const { consumerTag } = await channel.consume(
      this.options.queue,
      (message) => {
        if (message === null) {
          // The broker cancelled us (queue deleted): start over.
          this.lost(model);
          return;
        }
        const work = this.deliver(channel, message).catch((error: unknown) =>
          this.inbox.report(error, 'delivery'),
        );
        this.inflight.add(work);
        void work.finally(() => this.inflight.delete(work));
      },
      { noAck: false },
    );
    this.consumerTag = consumerTag;
    this.reconnects = 0;
  }

  private async declare(channel: ConfirmChannel): Promise<void> {
    const { queue } = this.options;
    if (this.options.assertQueue ?? true) await channel.assertQueue(queue, { durable: true });
    await channel.assertQueue(this.deadLetterQueue, { durable: true });
    for (const delay of new Set(this.retry.retryDelaysMs)) {
      // Every message in a retry queue has the same TTL, so expiry is FIFO and no message waits
      // behind a longer one; on expiry it is dead-lettered back to the main queue.
      await channel.assertQueue(this.retryQueue(delay), {
        durable: true,
        arguments: {
          'x-message-ttl': delay,
          'x-dead-letter-exchange': '',
          'x-dead-letter-routing-key': queue,
        },
      });
    }
  }

  private lost(model: ChannelModel): void {
    if (this.model !== model) return;
    this.model = undefined;
    this.channel = undefined;
    void model.close().catch(() => undefined);
    // Unacked deliveries go back to the queue with the connection; the inbox dedupes those whose
    // transaction had committed.
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.closing) return;
    clearTimeout(this.reconnectTimer);
    const delay = Math.min(30_000, 250 * 2 ** this.reconnects++);
    this.reconnectTimer = setTimeout(() => {
      this.connect().catch((error: unknown) => {
        this.inbox.report(error, 'reconnect');
        this.scheduleReconnect();
      });
    }, delay);
  }

  private async deliver(channel: ConfirmChannel, raw: ConsumeMessage): Promise<void> {
    const headers = (raw.properties.headers ?? {}) as Record<string, unknown>;
    const failedBefore = Number(headers[attemptsHeader] ?? 0) || 0;
    const attempt = failedBefore + 1;
    const id = raw.properties.messageId as unknown;
    if (typeof id !== 'string' || id.length === 0) {
      await this.deadLetter(
        channel,
        raw,
        attempt,
        new MessageWithoutIdError(`queue ${this.options.queue}`),
        null,
      );
      return;
    }
    const message: AmqpReceivedMessage = {
      id,
      body: raw.content,
      json: <T>() => JSON.parse(raw.content.toString('utf8')) as T,
      type: raw.properties.type as string | undefined,
      headers,
      attempt,
      redelivered: raw.fields.redelivered,
      raw,
    };
    const tenant = this.options.tenant ? this.options.tenant(message) : headerTenant(headers['idem-tenant']);
    try {
      await this.inbox.handle(id, tenant, message, headers);
    } catch (error) {
      if (isDatabaseOutage(error)) {
        // The database, not the message, failed: redeliver without spending an attempt, waiting
        // longer each time the same message meets the outage.
        const outages = (Number(headers[outagesHeader] ?? 0) || 0) + 1;
        await this.redeliverLater(
          channel,
          raw,
          { id, tenant, attempt, outage: true },
          failedBefore,
          error,
          outages,
          {
            [outagesHeader]: outages,
          },
        );
      } else if (this.retry.retryable(error) && attempt < this.retry.maxAttempts) {
        await this.redeliverLater(channel, raw, { id, tenant, attempt, outage: false }, attempt, error);
      } else {
        await this.deadLetter(channel, raw, attempt, error, id, tenant);
      }
      return;
    }
    // Committed (or already committed by an earlier delivery): only now ack.
    this.ack(channel, raw);
  }

  /**
   * Sends the message to the retry queue of the delay for `delayAttempt`, recording `failed`
   * failed deliveries in its header (`delivery.attempt` is the delivery that failed).
   */
  private async redeliverLater(
    channel: ConfirmChannel,
    raw: ConsumeMessage,
    delivery: { id: string; tenant: string | undefined; attempt: number; outage: boolean },
    failed: number,
    error: unknown,
    delayAttempt = failed,
    extraHeaders: Record<string, unknown> = {},
  ) {
    const delay = this.retry.delayFor(delayAttempt);
    const reason = describeError(error, 500);
    await publishConfirmed(channel, this.retryQueue(delay), raw, {
      ...extraHeaders,
      [attemptsHeader]: failed,
      'x-idem-last-error': reason,
    });
    if (this.ack(channel, raw)) {
      this.inbox.retried({
        messageId: delivery.id,
        ...(delivery.tenant === undefined ? {} : { tenant: delivery.tenant }),
        attempt: delivery.attempt,
        retryInMs: delay,
        error: reason,
        outage: delivery.outage,
      });
    }
  }

  private async deadLetter(
    channel: ConfirmChannel,
    raw: ConsumeMessage,
    attempt: number,
    error: unknown,
    id: string | null,
    tenant?: string,
  ): Promise<void> {
    const reason = describeError(error, 1000);
    await publishConfirmed(channel, this.deadLetterQueue, raw, {
      [attemptsHeader]: attempt,
      'x-idem-error': reason,
      'x-idem-failed-at': new Date().toISOString(),
      'x-idem-consumer': this.options.consumer,
      'x-idem-queue': this.options.queue,
    });
    if (id !== null) {
      await this.inbox.markDead(id, tenant, {
        attempts: attempt,
        error: reason,
        origin: this.options.queue,
        payload: raw.content,
        headers: stringHeaders(raw.properties.headers),
      });
    }
    if (this.ack(channel, raw)) {
      this.inbox.dead({
        messageId: id,
        ...(tenant === undefined ? {} : { tenant }),
        attempts: attempt,
        error: reason,
        origin: this.options.queue,
      });
    }
  }

  /** Acks on the channel the message came from; false when that channel is gone (it will be redelivered). */
  private ack(channel: ConfirmChannel, raw: ConsumeMessage): boolean {
    if (this.channel !== channel) return false;
    try {
      channel.ack(raw);
      return true;
    } catch (error) {
      this.inbox.report(error, 'ack');
      return false;
    }
  }
}

/**
 * Creates a RabbitMQ consumer for `options.queue`; `start()` connects and consumes, `stop()` lets
 * the handlers in flight finish (and ack) and closes. Creating it starts nothing.
 *
 * @example
 * const consumer = createRabbitMqConsumer({ inbox, consumer: 'billing', queue: 'orders', connection: process.env.AMQP_URL, handler });
 * await consumer.start();
 */
export function createRabbitMqConsumer<Client>(
  options: RabbitMqConsumerOptions<Client>,
): RabbitMqConsumer<Client> {
  return new RabbitMqConsumer(options);
}

/** Republishes a delivery to a queue (default exchange) and waits for the broker's confirm. */
function publishConfirmed(
  channel: ConfirmChannel,
  queue: string,
  raw: ConsumeMessage,
  extraHeaders: Record<string, unknown>,
): Promise<void> {
  const p = raw.properties;
  // `expiration` would expire the copy; `userId` must match the connection's user: both dropped.
  const options: Options.Publish = {
    messageId: p.messageId as string | undefined,
    correlationId: p.correlationId as string | undefined,
    type: p.type as string | undefined,
    contentType: p.contentType as string | undefined,
    contentEncoding: p.contentEncoding as string | undefined,
    timestamp: p.timestamp as number | undefined,
    appId: p.appId as string | undefined,
    priority: p.priority as number | undefined,
    persistent: true,
    headers: { ...(p.headers ?? {}), ...extraHeaders },
  };
  return new Promise<void>((resolve, reject) => {
    try {
      channel.sendToQueue(queue, raw.content, options, (error: unknown) =>
        error ? reject(asError(error)) : resolve(),
      );
    } catch (error) {
      reject(asError(error));
    }
  });
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(`RabbitMQ refused the publish: ${JSON.stringify(error)}`);
}

/** The tenant header as text (amqplib may hand it over as a Buffer), or undefined. */
function headerTenant(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return undefined;
}

function stringHeaders(headers: Record<string, unknown> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) {
    out[name] = typeof value === 'string' ? value : JSON.stringify(value);
  }
  return out;
}
