/**
 * NATS JetStream pull consumer with an inbox: ack (double-acked, so the server confirms it) only
 * after the handler's transaction committed, `nak` with a delay on failure, and after N deliveries
 * `term` with the reason, the message recorded in the inbox as dead.
 */
import type { ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import { isDatabaseOutage } from '../core/failures.js';
import type { NatsConnection } from '@nats-io/transport-node';
import type { JetStreamMessage, NatsConnectionLike } from '../brokers/nats-types.js';
import type { Transaction } from '../core/sql.js';
import { describeError } from '../core/describe-error.js';
import type { Inbox, InboxContext } from './inbox.js';
import type { IdemEvents } from '../core/event-channel.js';
import { ConsumerInbox } from './consumer-inbox.js';
import { resolveRetry, type ConsumerRetryOptions, type ResolvedRetry } from './retry.js';

/** A delivery as the handler sees it. */
export interface JetStreamReceivedMessage {
  /** `Nats-Msg-Id` (the outbox event id), or `<stream>:<sequence>` when the publisher set none. */
  id: string;
  subject: string;
  data: Uint8Array;
  json<T = unknown>(): T;
  headers: Record<string, string>;
  /** 1 on the first delivery. */
  attempt: number;
  raw: JetStreamMessage;
}

export interface JetStreamConsumerOptions<Client = unknown> extends ConsumerRetryOptions {
  inbox: Inbox<Client>;
  /** The inbox consumer name, e.g. `billing`. */
  consumer: string;
  /**
   * A connection you manage (`@nats-io/transport-node`'s `NatsConnection`), or server URLs (the
   * consumer connects and drains it on close).
   */
  connection: NatsConnectionLike | { servers: string | string[] };
  stream: string;
  /** Name of the durable JetStream consumer. */
  durable: string;
  /**
   * Create the durable consumer when missing: explicit acks, no server-side delivery limit (this
   * consumer counts and terms), `ackWaitMs` (default 30000 ms), and an optional subject filter.
   * Default `{}` (create). `false` requires it to exist.
   */
  create?: { filterSubject?: string; ackWaitMs?: number } | false;
  handler: (
    tx: Transaction<Client>,
    message: JetStreamReceivedMessage,
    context: InboxContext,
  ) => Promise<void>;
  /** Handlers running at once. 1 keeps the stream's order. Default 1. */
  concurrency?: number;
  /** Messages pulled per request. Default 64. */
  maxMessages?: number;
  /**
   * Where the consumer reports: `inbox:retried` and `inbox:dead` for the deliveries it `nak`ed or
   * `term`ed, and the errors it survives (a failed ack, the consumer deleted under it) as `error`
   * events with source `jetstream-consumer`. (`inbox:processed` and `inbox:duplicate` come from
   * the inbox.) Default: the inbox's channel (`inbox.events`).
   */
  events?: IdemEvents;
  /**
   * The tenant of a message, for its inbox record. Default: the `Idem-Tenant` header (idem's NATS
   * publisher sets it for events of a named tenant), else the inbox's `tenant`.
   */
  tenant?: (message: JetStreamReceivedMessage) => string | undefined;
}

export class JetStreamConsumer<Client = unknown> {
  private readonly retry: ResolvedRetry;
  private readonly inbox: ConsumerInbox<Client, JetStreamReceivedMessage>;
  private nc: NatsConnection | undefined;
  private messages: ConsumerMessages | undefined;
  private loop: Promise<void> | undefined;
  private readonly owned: boolean;
  /** Servers before 2.11 do not parse `+TERM <reason>` and leave the message pending. */
  private termWithReason = false;
  /** The consumer's ack wait: a handler running longer says "working" so it is not redelivered. */
  private ackWaitMs = 30_000;

  constructor(private readonly options: JetStreamConsumerOptions<Client>) {
    this.retry = resolveRetry(options);
    this.owned = 'servers' in options.connection;
    this.inbox = new ConsumerInbox({ ...options, recordDead: this.retry.recordDead }, 'jetstream-consumer');
  }

  async start(): Promise<void> {
    const { jetstream, jetstreamManager, AckPolicy } = await import('@nats-io/jetstream');
    const connection = this.options.connection;
    if ('servers' in connection) {
      const { connect } = await import('@nats-io/transport-node');
      this.nc = await connect({ servers: connection.servers, maxReconnectAttempts: -1 });
    } else {
      this.nc = connection as NatsConnection;
    }
    this.termWithReason = atLeast(this.nc.info?.version, 2, 11);
    const create = this.options.create ?? {};
    if (create) {
      const jsm = await jetstreamManager(this.nc);
      try {
        await jsm.consumers.info(this.options.stream, this.options.durable);
      } catch {
        await jsm.consumers.add(this.options.stream, {
          durable_name: this.options.durable,
          ack_policy: AckPolicy.Explicit,
          max_deliver: -1,
          ack_wait: (create.ackWaitMs ?? 30_000) * 1_000_000,
          ...(create.filterSubject ? { filter_subject: create.filterSubject } : {}),
        });
      }
    }
    const consumer = await jetstream(this.nc).consumers.get(this.options.stream, this.options.durable);
    const info = await consumer.info(true);
    if (info.config.ack_wait) this.ackWaitMs = info.config.ack_wait / 1_000_000;
    this.messages = await consumer.consume({ max_messages: this.options.maxMessages ?? 64 });
    // The iterator ends on close; it throws if the consumer is deleted under us: report, not crash.
    this.loop = this.run(this.messages).catch((error: unknown) => this.inbox.report(error, 'consume'));
  }

  /** Stops pulling, lets running handlers finish (and ack), and drains an owned connection. */
  async stop(): Promise<void> {
    await this.messages?.close();
    await this.loop;
    if (this.owned) await this.nc?.drain().catch(() => undefined);
  }

  private async run(messages: ConsumerMessages): Promise<void> {
    const limit = Math.max(1, this.options.concurrency ?? 1);
    const running = new Set<Promise<void>>();
    for await (const message of messages) {
      const work = this.deliver(message).catch((error: unknown) => this.inbox.report(error, 'delivery'));
      running.add(work);
      void work.finally(() => running.delete(work));
      if (running.size >= limit) await Promise.race(running);
    }
    await Promise.allSettled([...running]);
  }

  private async deliver(raw: JsMsg): Promise<void> {
    const headers: Record<string, string> = {};
    if (raw.headers) for (const [name, values] of raw.headers) headers[name] = values.join(',');
    const id = raw.headers?.get('Nats-Msg-Id') || `${raw.info.stream}:${raw.seq}`;
    const attempt = raw.info.deliveryCount;
    const message: JetStreamReceivedMessage = {
      id,
      subject: raw.subject,
      data: raw.data,
      json: <T>() => raw.json<T>(),
      headers,
      attempt,
      raw,
    };
    const tenant = this.options.tenant
      ? this.options.tenant(message)
      : raw.headers?.get('Idem-Tenant') || undefined;
    const heartbeat = setInterval(() => raw.working(), Math.max(100, this.ackWaitMs / 3));
    try {
      await this.inbox.handle(id, tenant, message, headers);
    } catch (error) {
      clearInterval(heartbeat);
      // The database, not the message, failed: redeliver whatever the count (the consumer has
      // no max_deliver), so an outage never dead-letters a message that was never really tried.
      const outage = isDatabaseOutage(error);
      if (outage || (this.retry.retryable(error) && attempt < this.retry.maxAttempts)) {
        const retryInMs = this.retry.delayFor(attempt);
        raw.nak(retryInMs);
        this.inbox.retried({
          messageId: id,
          ...(tenant === undefined ? {} : { tenant }),
          attempt,
          retryInMs,
          error: describeError(error, 1000),
          outage,
        });
        return;
      }
      const reason = describeError(error, 1000);
      await this.inbox.markDead(id, tenant, {
        attempts: attempt,
        error: reason,
        origin: `${raw.info.stream}/${raw.subject}`,
        payload: raw.data,
        headers,
      });
      if (this.termWithReason) raw.term(reason);
      else raw.term();
      this.inbox.dead({
        messageId: id,
        ...(tenant === undefined ? {} : { tenant }),
        attempts: attempt,
        error: reason,
        origin: `${raw.info.stream}/${raw.subject}`,
      });
      return;
    }
    clearInterval(heartbeat);
    // Committed: now ack, and wait for the server to confirm it. If the confirm is lost the
    // message comes back and the inbox answers "duplicate".
    try {
      await raw.ackAck();
    } catch (error) {
      this.inbox.report(error, 'ack');
    }
  }
}

function atLeast(version: string | undefined, major: number, minor: number): boolean {
  const [a = 0, b = 0] = (version ?? '').split('.').map(Number);
  return a > major || (a === major && b >= minor);
}

/**
 * Creates a JetStream consumer for `options.stream`; `start()` connects and pulls, `stop()` lets
 * the handlers in flight finish (and ack) and drains. Creating it starts nothing.
 *
 * @example
 * const consumer = createJetStreamConsumer({ inbox, consumer: 'billing', connection: { servers: process.env.NATS_URL }, stream: 'ORDERS', durable: 'billing', handler });
 * await consumer.start();
 */
export function createJetStreamConsumer<Client>(
  options: JetStreamConsumerOptions<Client>,
): JetStreamConsumer<Client> {
  return new JetStreamConsumer(options);
}
