/**
 * NATS JetStream publisher: waits for each PubAck (the stream stored the message) and sets
 * `Nats-Msg-Id` to the event id, so a republish inside the stream's duplicate window is dropped
 * by JetStream itself; consumers' inboxes catch the rest.
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import type { MsgHdrs, NatsConnection } from '@nats-io/transport-node';
import type { NatsConnectionLike } from '../../brokers/nats-types.js';
import { describeError, PublishError } from '../errors.js';
import type { OutboxEvent, Publisher, PublishResult } from '../types.js';

export interface NatsPublisherOptions {
  /**
   * A connection you manage, or server URLs (the publisher connects, lets the client reconnect,
   * and drains it on `close`).
   */
  connection: NatsConnectionLike | { servers: string | string[] };
  /** Subject of an event. Default: its topic. A stream must capture the subject. */
  subject?: (event: OutboxEvent) => string;
  /** How long to wait for each PubAck. Default 5000 ms. */
  timeoutMs?: number;
  /** The message body. Default: the payload as UTF-8 JSON. */
  encode?: (event: OutboxEvent) => Uint8Array;
}

/** Error names that mean "the server is not reachable now", not "this message is bad". */
const outageErrors = new Set([
  'TimeoutError',
  'ClosedConnectionError',
  'ConnectionError',
  'DrainingConnectionError',
]);

export class NatsPublisher implements Publisher {
  readonly name = 'nats';
  private connecting: Promise<{ nc: NatsConnection; js: JetStreamClient }> | undefined;
  private readonly owned: boolean;

  constructor(private readonly options: NatsPublisherOptions) {
    this.owned = 'servers' in options.connection;
  }

  async publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<readonly PublishResult[]> {
    let js: JetStreamClient;
    let hdrs: () => MsgHdrs;
    try {
      let client = await this.client();
      if (client.nc.isClosed() && this.owned) {
        this.connecting = undefined;
        client = await this.client();
      }
      js = client.js;
      hdrs = (await import('@nats-io/transport-node')).headers;
    } catch (error) {
      this.connecting = undefined;
      throw new PublishError(`cannot reach NATS: ${describeError(error)}`, { cause: error });
    }
    const subject = this.options.subject ?? ((event: OutboxEvent) => event.topic);
    const encode =
      this.options.encode ?? ((event: OutboxEvent) => Buffer.from(JSON.stringify(event.payload)));
    const settled = await Promise.allSettled(
      events.map((event) => {
        const h = hdrs();
        for (const [name, value] of Object.entries(event.headers)) h.set(name, value);
        h.set('Idem-Topic', event.topic);
        h.set('Idem-Key', event.key);
        h.set('Idem-Type', event.type);
        // Only for a named tenant: events of the default tenant keep the headers they had.
        if (event.tenant) h.set('Idem-Tenant', event.tenant);
        return js.publish(subject(event), encode(event), {
          msgID: event.id,
          headers: h,
          timeout: this.options.timeoutMs ?? 5000,
        });
      }),
    );
    if (signal.aborted) throw signal.reason;
    const results: PublishResult[] = [];
    for (let i = 0; i < events.length; i++) {
      const event = events[i]!;
      const outcome = settled[i]!;
      if (outcome.status === 'fulfilled') {
        // A duplicate PubAck means the stream already holds this id: published.
        results.push({ id: event.id, ok: true });
      } else if (outageErrors.has((outcome.reason as Error)?.name)) {
        throw new PublishError(`NATS unavailable: ${describeError(outcome.reason)}`, {
          cause: outcome.reason,
        });
      } else {
        results.push({ id: event.id, ok: false, error: outcome.reason });
      }
    }
    return results;
  }

  async close(): Promise<void> {
    const connecting = this.connecting;
    this.connecting = undefined;
    if (!connecting || !this.owned) return;
    const { nc } = await connecting.catch(() => ({ nc: undefined }));
    await nc?.drain().catch(() => undefined);
  }

  private client(): Promise<{ nc: NatsConnection; js: JetStreamClient }> {
    this.connecting ??= (async () => {
      const { jetstream } = await import('@nats-io/jetstream');
      const connection = this.options.connection;
      let nc: NatsConnection;
      if ('servers' in connection) {
        const { connect } = await import('@nats-io/transport-node');
        // Keep reconnecting forever: the dispatcher treats the gap as an outage and waits.
        nc = await connect({ servers: connection.servers, maxReconnectAttempts: -1 });
      } else {
        nc = connection as NatsConnection;
      }
      return { nc, js: jetstream(nc) };
    })();
    return this.connecting;
  }
}

export function createNatsPublisher(options: NatsPublisherOptions): NatsPublisher {
  return new NatsPublisher(options);
}
