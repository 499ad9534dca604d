/**
 * RabbitMQ publisher (amqplib): publisher confirms, `mandatory` so an unroutable event is a failure
 * rather than a silent drop, and the event id as AMQP `message_id` so consumers dedupe on it.
 */
import type { ChannelModel, ConfirmChannel, Message } from 'amqplib';
import { connectAmqp } from '../../brokers/amqp-connect.js';
import type { AmqpChannelModel } from '../../brokers/amqp-types.js';
import { describeError, PublishError } from '../errors.js';
import type { OutboxEvent, Publisher, PublishResult } from '../types.js';

/** Where an event goes: an exchange and a routing key. */
export interface AmqpRoute {
  exchange: string;
  routingKey: string;
}

export interface RabbitMqPublisherOptions {
  /**
   * An AMQP URL (the publisher connects, reconnects after a loss, and closes on `close`), or a
   * factory returning a connected amqplib `ChannelModel` (called again after a loss; the
   * publisher closes what it returns).
   */
  connection: string | (() => Promise<AmqpChannelModel>);
  /** Default: exchange = the event's topic, routing key = its type. */
  route?: (event: OutboxEvent) => AmqpRoute;
  /**
   * Publish with `mandatory`: a message no queue is bound for comes back and counts as a
   * (retryable) failure instead of being confirmed and dropped. Default true.
   */
  mandatory?: boolean;
  /** Persistent delivery mode (survives a broker restart on durable queues). Default true. */
  persistent?: boolean;
  /** The message body. Default: the payload as UTF-8 JSON with `content_type: application/json`. */
  encode?: (event: OutboxEvent) => { body: Buffer; contentType: string };
}

/** AMQP reply codes that close only the channel and concern what was published, not the broker. */
const channelLevelCodes = new Set([403, 404, 405, 406]);

/**
 * @example
 * const publisher = createRabbitMqPublisher({ connection: 'amqp://localhost' });
 * const dispatcher = createOutboxDispatcher({ sql, publisher });
 */
export class RabbitMqPublisher implements Publisher {
  readonly name = 'rabbitmq';
  private model: ChannelModel | undefined;
  private channel: ConfirmChannel | undefined;
  private opening: Promise<ConfirmChannel> | undefined;
  /** A channel-level error (e.g. 404 no such exchange) that closed the current channel. */
  private channelError: (Error & { code?: number }) | undefined;
  private closed = false;
  private readonly route: (event: OutboxEvent) => AmqpRoute;
  private readonly encode: (event: OutboxEvent) => { body: Buffer; contentType: string };

  constructor(private readonly options: RabbitMqPublisherOptions) {
    this.route = options.route ?? ((event) => ({ exchange: event.topic, routingKey: event.type }));
    this.encode =
      options.encode ??
      ((event) => ({ body: Buffer.from(JSON.stringify(event.payload)), contentType: 'application/json' }));
  }

  async publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<readonly PublishResult[]> {
    let channel: ConfirmChannel;
    try {
      channel = await this.open();
    } catch (error) {
      // Unreachable broker: an outage, no attempt is counted.
      throw new PublishError(`cannot reach RabbitMQ: ${describeError(error)}`, { cause: error });
    }
    const results = new Map<string, PublishResult>();
    const returned = new Set<string>();
    const onReturn = (message: Message) => {
      const id = message.properties.messageId as unknown;
      if (typeof id === 'string') returned.add(id);
    };
    channel.on('return', onReturn);
    try {
      const confirms: Promise<void>[] = [];
      for (const event of events) {
        confirms.push(this.publishOne(channel, event, returned, results));
      }
      await abortable(Promise.all(confirms), signal);
    } finally {
      channel.off('return', onReturn);
    }
    if (this.channel !== channel) {
      // The channel closed while we waited. A channel-level error (no such exchange, access
      // refused) is about these events: report it per event. Anything else is the connection.
      const channelError = this.channelError;
      if (!channelError || !channelLevelCodes.has(channelError.code ?? 0)) {
        throw new PublishError('RabbitMQ connection lost before every publish was confirmed', {
          cause: channelError,
        });
      }
      for (const event of events) {
        if (!results.get(event.id)?.ok) {
          results.set(event.id, { id: event.id, ok: false, error: channelError, retryable: true });
        }
      }
    }
    return events.map(
      (event) =>
        results.get(event.id) ?? {
          id: event.id,
          ok: false,
          error: new PublishError('RabbitMQ did not confirm the publish'),
        },
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    const model = this.model;
    this.model = undefined;
    this.channel = undefined;
    await model?.close().catch(() => undefined);
  }

  private publishOne(
    channel: ConfirmChannel,
    event: OutboxEvent,
    returned: Set<string>,
    results: Map<string, PublishResult>,
  ): Promise<void> {
    return new Promise<void>((resolve) => {
      try {
        const { exchange, routingKey } = this.route(event);
        const { body, contentType } = this.encode(event);
        channel.publish(
          exchange,
          routingKey,
          body,
          {
            messageId: event.id,
            type: event.type,
            contentType,
            persistent: this.options.persistent ?? true,
            mandatory: this.options.mandatory ?? true,
            timestamp: Math.floor(event.createdAt / 1000),
            headers: {
              ...event.headers,
              'idem-topic': event.topic,
              'idem-key': event.key,
              // Only for a named tenant: events of the default tenant keep the bytes they had.
              ...(event.tenant ? { 'idem-tenant': event.tenant } : {}),
            },
          },
          (error: unknown) => {
            if (error) {
              results.set(event.id, {
                id: event.id,
                ok: false,
                error: asError(error, 'RabbitMQ refused the message'),
              });
            } else if (returned.has(event.id)) {
              results.set(event.id, {
                id: event.id,
                ok: false,
                error: new PublishError(
                  `unroutable: no queue is bound to ${exchange || '(default)'} / ${routingKey}`,
                ),
              });
            } else {
              results.set(event.id, { id: event.id, ok: true });
            }
            resolve();
          },
        );
      } catch (error) {
        // Thrown synchronously: the message itself is bad (e.g. headers over 64 KiB), or the
        // channel is already closed (then the check after the batch turns it into an outage).
        results.set(event.id, { id: event.id, ok: false, error, retryable: this.channel !== channel });
        resolve();
      }
    });
  }

  private open(): Promise<ConfirmChannel> {
    if (this.closed) return Promise.reject(new PublishError('publisher is closed', { retryable: false }));
    if (this.channel) return Promise.resolve(this.channel);
    this.opening ??= this.connect().finally(() => {
      this.opening = undefined;
    });
    return this.opening;
  }

  private async connect(): Promise<ConfirmChannel> {
    let model = this.model;
    if (!model) {
      model = await connectAmqp(this.options.connection);
      model.on('error', () => undefined); // 'close' follows; without a listener 'error' would throw
      model.on('close', () => {
        if (this.model === model) {
          this.model = undefined;
          this.channel = undefined;
        }
      });
      this.model = model;
    }
    const channel = await model.createConfirmChannel();
    this.channelError = undefined;
    channel.on('error', (error: Error & { code?: number }) => {
      this.channelError = error;
    });
    channel.on('close', () => {
      if (this.channel === channel) this.channel = undefined;
    });
    this.channel = channel;
    return channel;
  }
}

export function createRabbitMqPublisher(options: RabbitMqPublisherOptions): RabbitMqPublisher {
  return new RabbitMqPublisher(options);
}

function asError(error: unknown, fallback: string): Error {
  return error instanceof Error ? error : new PublishError(fallback, { cause: error });
}

/** Rejects when `signal` aborts; the publishes still settle in the background. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: Error) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}
