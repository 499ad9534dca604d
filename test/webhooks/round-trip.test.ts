/**
 * Round trip: events added to the outbox in business transactions, dispatched by the outbox
 * dispatcher through `createWebhookPublisher`, delivered by our sender as signed
 * Standard Webhooks to our receiver on Express, Fastify, Hono and node:http, through a proxy that
 * loses the first answer to every delivery (the receipt is stored, the sender sees 502 and retries
 * with the same webhook-id). Every event takes effect exactly once per receiving service.
 */
import { createServer } from 'node:http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import { createOutboxDispatcher, createOutbox } from '../../src/outbox/index.js';
import {
  createWebhookProcessor,
  createWebhookReceiver,
  createWebhookSender,
  generateWebhookSecret,
  createStandardWebhooksVerifier,
  createWebhookPublisher,
} from '../../src/webhooks/index.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { count, frameworks, listenNode, startServer, type TestServer } from './support.js';

let db: TestSchema;
const servers: TestServer[] = [];

beforeAll(async () => {
  db = await createTestSchema();
});

afterAll(async () => {
  for (const server of servers) await server.close();
  await db?.close();
});

/** A proxy that forwards to `target` and, the first time it sees a webhook-id, answers 502 instead of the real answer. */
async function lossyProxy(
  target: string,
): Promise<TestServer & { stats: { lost: number; forwarded: number } }> {
  const seen = new Set<string>();
  const stats = { lost: 0, forwarded: 0 };
  const server = await listenNode(
    createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(req.headers))
          if (typeof v === 'string' && k !== 'host') headers[k] = v;
        fetch(target + (req.url ?? ''), { method: 'POST', headers, body: Buffer.concat(chunks) })
          .then(async (answer) => {
            const body = await answer.text();
            stats.forwarded++;
            const id = headers['webhook-id']!;
            if (!seen.has(id)) {
              seen.add(id);
              stats.lost++;
              res.writeHead(502).end('answer lost');
              return;
            }
            res
              .writeHead(answer.status, {
                'content-type': answer.headers.get('content-type') ?? 'text/plain',
              })
              .end(body);
          })
          .catch(() => res.writeHead(500).end());
      });
    }),
  );
  return { ...server, stats };
}

it('every event takes effect once, through lost answers and retries, on every framework', async () => {
  const clock = new ManualClock(Math.floor(Date.now() / 1000) * 1000);
  const secret = generateWebhookSecret();
  const sourceOf = (framework: string) => `via-${framework}`;
  await db.pool.query(
    `CREATE TABLE "${db.schema}".effects (source text NOT NULL, delivery_id text NOT NULL, invoice int NOT NULL)`,
  );

  const receiver = createWebhookReceiver({
    sql: fromPg(db.pool),
    schema: db.schema,
    clock,
    sources: Object.fromEntries(
      frameworks.map((f) => [sourceOf(f), createStandardWebhooksVerifier({ secrets: [secret] })]),
    ),
  });
  const processor = createWebhookProcessor({
    sql: fromPg(db.pool),
    schema: db.schema,
    clock,
    handlers: Object.fromEntries(
      frameworks.map((f) => [
        sourceOf(f),
        {
          'invoice.paid': async (tx, event) => {
            const { data } = event.json<{ data: { invoice: number } }>();
            await tx.query(
              `INSERT INTO "${db.schema}".effects (source, delivery_id, invoice) VALUES ($1, $2, $3)`,
              [event.source, event.deliveryId, data.invoice],
            );
          },
        },
      ]),
    ),
  });
  // No breaker here: the proxy fails every first answer on purpose, which would open it (the
  // breaker is tested in sender.test.ts).
  const sender = createWebhookSender({
    sql: fromPg(db.pool),
    schema: db.schema,
    clock,
    breaker: false,
    // The subscribers are servers on loopback, which the sender refuses unless allowed.
    allowedDestinations: ['127.0.0.1'],
  });
  const proxies: Awaited<ReturnType<typeof lossyProxy>>[] = [];
  for (const framework of frameworks) {
    const server = await startServer(framework, receiver);
    const proxy = await lossyProxy(server.url);
    servers.push(server, proxy);
    proxies.push(proxy);
    await sender.endpoints.create({
      id: framework,
      url: `${proxy.url}/hooks/${sourceOf(framework)}`,
      secrets: [secret],
    });
  }

  // The producer: each invoice row and its event commit together (the outbox).
  const outbox = createOutbox({ sql: fromPg(db.pool), schema: db.schema, clock, notify: false });
  await db.pool.query(`CREATE TABLE "${db.schema}".invoices (id int PRIMARY KEY)`);
  const sql = fromPg(db.pool);
  const events: { id: string; invoice: number }[] = [];
  for (let invoice = 0; invoice < 15; invoice++) {
    const id = await sql.transaction(async (tx) => {
      await tx.query(`INSERT INTO "${db.schema}".invoices (id) VALUES ($1)`, [invoice]);
      return outbox.add(tx, {
        topic: 'billing',
        key: `invoice-${invoice}`,
        type: 'invoice.paid',
        payload: { invoice },
      });
    });
    events.push({ id, invoice });
  }
  const publisher = createWebhookPublisher({ sender, notify: false });
  const dispatcher = createOutboxDispatcher({
    sql,
    schema: db.schema,
    clock,
    publisher,
    sweepIntervalMs: 0,
  });
  const dispatched = await dispatcher.drain();
  expect(dispatched).toMatchObject({ published: events.length, retried: 0, dead: 0 });
  expect((await outbox.stats()).pending).toBe(0);
  // The dispatcher may publish an event again (at-least-once): nothing new is fanned out.
  const again = await outbox.get({ id: events[0]!.id });
  expect(await publisher.publish([again!], new AbortController().signal)).toEqual([
    { id: events[0]!.id, ok: true },
  ]);
  expect(await count(db.pool, db.schema, 'webhook_deliveries')).toBe(events.length * frameworks.length);

  // Deliver until nothing is left, moving the clock past each retry's delay (5 s, then 5 min).
  for (let round = 0; round < 5; round++) {
    await sender.drain({ limit: 16 });
    clock.advance(6 * 60_000);
  }
  const deliveries = await sender.listDeliveries();
  expect(deliveries).toHaveLength(events.length * frameworks.length);
  expect(deliveries.every((d) => d.state === 'delivered' && d.attempts === 2)).toBe(true);
  for (const proxy of proxies) {
    expect(proxy.stats.lost).toBe(events.length);
    expect(proxy.stats.forwarded).toBe(2 * events.length);
  }

  // Every receipt was stored at the first (lost) answer; the retry was a duplicate. Then processing.
  expect(await count(db.pool, db.schema, 'webhook_receipts')).toBe(events.length * frameworks.length);
  await processor.drain({ limit: 16 });
  const { rows } = await db.pool.query<{ source: string; n: number; distinct: number }>(
    `SELECT source, count(*)::int AS n, count(DISTINCT invoice)::int AS distinct
     FROM "${db.schema}".effects GROUP BY source ORDER BY source`,
  );
  expect(rows).toEqual(
    frameworks
      .map((f) => ({ source: sourceOf(f), n: events.length, distinct: events.length }))
      .sort((a, b) => a.source.localeCompare(b.source)),
  );
  // Delivery ids on the receiving side are the outbox event ids.
  const { rows: ids } = await db.pool.query<{ delivery_id: string }>(
    `SELECT DISTINCT delivery_id FROM "${db.schema}".effects ORDER BY delivery_id`,
  );
  expect(ids.map((r) => r.delivery_id)).toEqual(events.map((e) => e.id).sort());
});
