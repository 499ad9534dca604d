/**
 * How the demo's events travel from the outbox to the ledger's inbox: inside PostgreSQL by
 * default, or through RabbitMQ (`AMQP_URL`) or NATS JetStream (`NATS_URL`). Whatever the
 * transport, delivery is at least once and the inbox makes the effect happen once.
 */
import type { Inbox } from '../src/inbox/inbox.js';
import type { Publisher } from '../src/outbox/types.js';
import { createInDatabasePublisher } from '../src/outbox/publishers/in-database.js';
import { untilBrokerAnswers, type BrokerWaitOptions } from './broker-wait.js';
import { applyToLedger, ledgerConsumer } from './ledger.js';

export interface Transport {
  name: 'in-database' | 'rabbitmq' | 'nats';
  publisher: Publisher;
  /** Starts the broker consumer, when there is one. */
  start(): Promise<void>;
  close(): Promise<void>;
}

export interface TransportOptions {
  inbox: Inbox;
  demoSchema: string;
  amqpUrl?: string;
  natsUrl?: string;
  /** Prefix of queue, exchange and stream names, so several demos can share a broker. */
  namespace: string;
  /** How long a broker that does not answer yet is waited for (see broker-wait.ts). */
  brokerWait?: BrokerWaitOptions;
}

const topic = 'payments';

export async function createTransport(options: TransportOptions): Promise<Transport> {
  const { inbox, demoSchema } = options;
  if (options.amqpUrl) return rabbitMqTransport(options, options.amqpUrl);
  if (options.natsUrl) return natsTransport(options, options.natsUrl);
  return {
    name: 'in-database',
    publisher: createInDatabasePublisher({
      inbox,
      subscribers: [
        {
          consumer: ledgerConsumer,
          topics: [topic],
          handler: (tx, event) => applyToLedger(tx, demoSchema, event),
        },
      ],
    }),
    start: async () => {},
    close: async () => {},
  };
}

async function rabbitMqTransport(options: TransportOptions, url: string): Promise<Transport> {
  const amqp = await import('amqplib');
  const { createRabbitMqPublisher } = await import('../src/outbox/publishers/rabbitmq.js');
  const { RabbitMqConsumer } = await import('../src/inbox/rabbitmq-consumer.js');
  const exchange = `${options.namespace}.payments`;
  const queue = `${options.namespace}.ledger`;
  // Topology: one topic exchange, one durable queue for the ledger bound to every event type.
  await untilBrokerAnswers(
    `RabbitMQ at ${redacted(url)}`,
    async () => {
      const setup = await amqp.connect(url);
      try {
        const channel = await setup.createChannel();
        await channel.assertExchange(exchange, 'topic', { durable: true });
        await channel.assertQueue(queue, { durable: true });
        await channel.bindQueue(queue, exchange, '#');
      } finally {
        await setup.close().catch(() => undefined);
      }
    },
    options.brokerWait,
  );

  const publisher = createRabbitMqPublisher({
    connection: url,
    route: (event) => ({ exchange, routingKey: event.type }),
  });
  const consumer = new RabbitMqConsumer({
    inbox: options.inbox,
    consumer: ledgerConsumer,
    queue,
    connection: url,
    prefetch: 16,
    retryDelaysMs: [200, 1000, 5000],
    handler: (tx, message) =>
      applyToLedger(tx, options.demoSchema, {
        id: message.id,
        type: message.type ?? '',
        payload: JSON.parse(message.body.toString('utf8')),
      }),
  });
  return {
    name: 'rabbitmq',
    publisher,
    start: () =>
      untilBrokerAnswers(
        `RabbitMQ at ${redacted(url)}`,
        async () => {
          try {
            await consumer.start();
          } catch (error) {
            // Leaves no half-open connection or scheduled reconnect behind the next attempt.
            await consumer.stop();
            throw error;
          }
        },
        options.brokerWait,
      ),
    close: async () => {
      await consumer.stop();
      await publisher.close?.();
    },
  };
}

async function natsTransport(options: TransportOptions, url: string): Promise<Transport> {
  const { connect } = await import('@nats-io/transport-node');
  const { jetstreamManager } = await import('@nats-io/jetstream');
  const { createNatsPublisher } = await import('../src/outbox/publishers/nats.js');
  const { JetStreamConsumer } = await import('../src/inbox/jetstream-consumer.js');
  const subject = `${options.namespace}.payments`;
  const stream = `${options.namespace.replace(/[^A-Za-z0-9_-]/g, '_')}_payments`;
  const nc = await untilBrokerAnswers(
    `NATS at ${redacted(url)}`,
    () => connect({ servers: url }),
    options.brokerWait,
  );
  const jsm = await jetstreamManager(nc);
  await jsm.streams.info(stream).catch(() => jsm.streams.add({ name: stream, subjects: [subject] }));

  const publisher = createNatsPublisher({ connection: nc, subject: () => subject });
  const consumer = new JetStreamConsumer({
    inbox: options.inbox,
    consumer: ledgerConsumer,
    connection: nc,
    stream,
    durable: 'ledger',
    retryDelaysMs: [200, 1000, 5000],
    handler: (tx, message) => {
      const parsed = JSON.parse(Buffer.from(message.data).toString('utf8')) as unknown;
      return applyToLedger(tx, options.demoSchema, {
        id: message.id,
        type: message.headers['Idem-Type'] ?? message.headers['idem-type'] ?? '',
        payload: parsed,
      });
    },
  });
  return {
    name: 'nats',
    publisher,
    start: () => consumer.start(),
    close: async () => {
      await consumer.stop();
      await nc.drain();
    },
  };
}

/** A broker URL for a log line: without its password. */
function redacted(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return 'the configured URL';
  }
}
