/**
 * Trace context and intent across a broker, on real RabbitMQ and NATS JetStream: every message idem
 * publishes carries `traceparent` and `idem-intent`; a consumer in another process (a child with
 * its own tracer) records the intent on its inbox record and continues the producer's trace; and
 * with an HTTP caller in front, the caller's trace id reaches that consumer.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import amqp from 'amqplib';
import { AckPolicy, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { idempotency } from 'idem/node-http';
import { createIdem, createTrace, type Idem, type Sql } from 'idem';
import {
  createNatsPublisher,
  createOutbox,
  createOutboxDispatcher,
  createRabbitMqPublisher,
  type Outbox,
} from 'idem/outbox';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { serviceUrl } from '../support/services.js';
import { uniqueName } from '../support/brokers.js';
import { installMemoryTracer, type RecordedSpan } from './memory-tracer.js';

const amqpUrl = serviceUrl('AMQP_URL');
const natsUrl = serviceUrl('NATS_URL');
const tenant = 'acme';

describe.skipIf(!amqpUrl && !natsUrl)('causation across brokers', () => {
  let db: TestSchema;
  let sql: Sql;
  let idem: Idem;
  let outbox: Outbox;
  let spans: RecordedSpan[];

  beforeAll(async () => {
    spans = installMemoryTracer();
    db = await createTestSchema({ poolSize: 4 });
    sql = fromPg(db.pool);
    idem = createIdem({ sql, schema: db.schema });
    outbox = createOutbox({ sql, schema: db.schema });
  });

  afterAll(async () => {
    await db?.close();
  });

  /** Adds an event to `topic` inside the intent `key`; its id, and the operation span's traceparent. */
  async function publishInIntent(key: string, topic: string) {
    const { value: id } = await idem.run({ tenant, operation: 'create-payment', key }, (tx) =>
      outbox.add(tx, { tenant, topic, key, type: 'payment.created', payload: { key } }),
    );
    const run = spans.filter((span) => span.name === 'idem.run').at(-1)!;
    return {
      id,
      run,
      traceparent: `00-${run.traceId}-${run.spanId}-01`,
      ref: `${tenant}/create-payment/${key}`,
    };
  }

  /**
   * A consumer process on a fresh RabbitMQ queue. `deliver()` drains the outbox's events of that
   * queue to RabbitMQ and returns what the consumer saw: the headers and the spans it recorded.
   */
  async function rabbitConsumer() {
    const queue = uniqueName('trace');
    const admin = await amqp.connect(amqpUrl!);
    // The consumer declares the queue (as it does in production) before it says ready.
    const channel = await admin.createChannel();
    const child = spawnConsumer({
      DATABASE_URL: databaseUrl(),
      SCHEMA: db.schema,
      AMQP_URL: amqpUrl!,
      QUEUE: queue,
    });
    const publisher = createRabbitMqPublisher({
      connection: amqpUrl!,
      route: () => ({ exchange: '', routingKey: queue }),
    });
    return {
      queue,
      ready: () => child.line('ready'),
      async deliver() {
        const drained = await createOutboxDispatcher({
          sql,
          schema: db.schema,
          publisher,
          topics: [queue],
        }).drain();
        expect(drained.published).toBe(1);
        const line = await child.line('RESULT ');
        return JSON.parse(line.slice('RESULT '.length)) as {
          headers: Record<string, unknown>;
          spans: RecordedSpan[];
        };
      },
      async close() {
        child.kill();
        await publisher.close();
        await channel.deleteQueue(queue).catch(() => undefined);
        await admin.close();
      },
    };
  }

  it.skipIf(!amqpUrl)(
    'RabbitMQ: the consumer process records the intent and joins the trace as a child span',
    async () => {
      const ledger = await rabbitConsumer();
      try {
        await ledger.ready();
        const { id, run, traceparent, ref } = await publishInIntent('order-2001', ledger.queue);
        const result = await ledger.deliver();
        expect(result.headers).toMatchObject({ traceparent, 'idem-intent': ref });
        const consumer = result.spans.find((span) => span.name === 'idem.inbox.handle');
        expect(consumer).toMatchObject({
          traceId: run.traceId,
          parentSpanId: run.spanId,
          attributes: { 'idem.intent': ref },
        });

        const { rows } = await sql.query<{ intent: string; traceparent: string }>(
          `SELECT intent, traceparent FROM "${db.schema}".inbox WHERE tenant_id = $1 AND message_id = $2`,
          [tenant, id],
        );
        expect(rows).toEqual([{ intent: ref, traceparent: `00-${run.traceId}-${consumer!.spanId}-01` }]);
        const timeline = await createTrace({ sql, schema: db.schema }).message(id, { tenant });
        expect(timeline?.items.map((item) => item.kind)).toEqual(['request', 'outbox', 'consumption']);
      } finally {
        await ledger.close();
      }
    },
  );

  it.skipIf(!amqpUrl)(
    'RabbitMQ: one trace id from an HTTP caller, through the request and its event, to the consumer process',
    async () => {
      const ledger = await rabbitConsumer();
      // The API: POST /payments adds `payment.created` in the request's transaction.
      const api = idempotency({
        idem,
        tenant: () => tenant,
        route: '/payments',
        handler: async (req, res) => {
          const key = req.headers['idempotency-key'] as string;
          await outbox.add(req.idem!.tx, {
            tenant,
            topic: ledger.queue,
            key,
            type: 'payment.created',
            payload: { key },
          });
          res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}');
        },
      });
      const server = createServer((req, res) => void api(req, res));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      try {
        await ledger.ready();
        const traceId = randomBytes(16).toString('hex');
        const callerSpan = randomBytes(8).toString('hex');
        const { port } = server.address() as AddressInfo;
        const response = await fetch(`http://127.0.0.1:${port}/payments`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'idempotency-key': 'order-2101',
            traceparent: `00-${traceId}-${callerSpan}-01`,
          },
          body: '{"amount":1250}',
        });
        expect(response.status).toBe(201);
        const run = spans.find((span) => span.name === 'idem.run' && span.traceId === traceId);
        expect(run?.parentSpanId).toBe(callerSpan);
        const result = await ledger.deliver();
        const consumer = result.spans.find((span) => span.name === 'idem.inbox.handle');
        // The caller's trace id, end to end: HTTP caller → idem.run → the event → the consumer.
        expect(consumer).toMatchObject({ traceId, parentSpanId: run!.spanId });
        expect(result.headers).toMatchObject({ 'idem-intent': `${tenant}/POST%20%2Fpayments/order-2101` });
      } finally {
        await new Promise((resolve) => server.close(resolve));
        await ledger.close();
      }
    },
  );

  it.skipIf(!natsUrl)(
    'NATS JetStream: the published message carries traceparent and the intent',
    async () => {
      const nc = await connect({ servers: natsUrl! });
      const jsm = await jetstreamManager(nc);
      const stream = uniqueName('trace');
      await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
      try {
        const topic = `${stream}.events`;
        const { traceparent, ref } = await publishInIntent('order-3001', topic);
        const publisher = createNatsPublisher({ connection: nc });
        expect(
          (await createOutboxDispatcher({ sql, schema: db.schema, publisher, topics: [topic] }).drain())
            .published,
        ).toBe(1);
        await jsm.consumers.add(stream, { durable_name: 'reader', ack_policy: AckPolicy.Explicit });
        const message = await jsm
          .jetstream()
          .consumers.get(stream, 'reader')
          .then((c) => c.next());
        expect(message?.headers?.get('traceparent')).toBe(traceparent);
        expect(message?.headers?.get('idem-intent')).toBe(ref);
      } finally {
        await jsm.streams.delete(stream).catch(() => undefined);
        await nc.close();
      }
    },
  );
});

/** The consumer child process (children/traced-consumer.ts), with its output by line. */
function spawnConsumer(env: Record<string, string>) {
  const script = fileURLToPath(new URL('./children/traced-consumer.ts', import.meta.url));
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const waiting: { prefix: string; resolve: (line: string) => void }[] = [];
  const take = (chunk: Buffer) => {
    for (const line of chunk.toString('utf8').split('\n')) {
      if (!line) continue;
      lines.push(line);
      for (const w of waiting.filter((w) => line.startsWith(w.prefix))) w.resolve(line);
    }
  };
  child.stdout.on('data', take);
  child.stderr.on('data', take);
  return {
    line: (prefix: string) =>
      new Promise<string>((resolve, reject) => {
        const found = lines.find((line) => line.startsWith(prefix));
        if (found) return resolve(found);
        waiting.push({ prefix, resolve });
        child.once('exit', (code) => reject(new Error(`consumer exited (${code}): ${lines.join('\n')}`)));
      }),
    kill: () => child.kill('SIGKILL'),
  };
}
