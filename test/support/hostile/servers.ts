/**
 * The surfaces under attack, on real servers on 127.0.0.1 over one test schema: a node:http
 * handler behind `withIdempotency`, a Fastify app with the `idempotency` plugin, and a node:http
 * webhook receiver. Each handler writes one business row per request, so a partially stored request
 * would show as a row count that moved.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { fromPg } from 'idem/pg';
import { createEvents, createIdem } from 'idem';
import { idempotency } from 'idem/fastify';
import { idempotency as nodeIdempotency, webhooks as nodeWebhooks } from 'idem/node-http';
import { createStandardWebhooksVerifier, createWebhookReceiver } from 'idem/webhooks';
import { createTestSchema, type TestSchema } from '../database.js';

export const webhookSecret =
  'whsec_' + Buffer.from('hostile-input-test-secret-0123456789').toString('base64');

export interface Counts {
  orders: number;
  requests: number;
  receipts: number;
}

export interface Surfaces {
  db: TestSchema;
  nodePort: number;
  fastifyPort: number;
  webhookPort: number;
  /** What the surfaces reported, one line each: their `error` events and the receiver's refusals. */
  logged: string[];
  /** Row counts of every table a request could write. */
  counts(): Promise<Counts>;
  close(): Promise<void>;
}

const listen = (server: Server) =>
  new Promise<number>((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
  );

export async function startSurfaces(): Promise<Surfaces> {
  const db = await createTestSchema();
  const { pool, schema } = db;
  await pool.query(`CREATE TABLE "${schema}".orders (id serial PRIMARY KEY, via text NOT NULL, body text)`);
  const idem = createIdem({ sql: fromPg(pool), schema, waitMs: 500 });
  const logged: string[] = [];
  const log = (error: unknown) =>
    logged.push(error instanceof Error ? `${error.name}: ${error.message}\n${error.stack}` : String(error));
  const events = createEvents();
  events.on('error', ({ source, where, error }) => {
    logged.push(`${source} ${where}`);
    log(error);
  });
  events.on('webhook:rejected', (event) => logged.push(`webhook:rejected ${JSON.stringify(event)}`));

  const handler = nodeIdempotency({
    idem,
    tenant: () => 'acme',
    route: '/orders',
    maxBodyBytes: 256 * 1024,
    events,
    handler: async (req, res) => {
      await req.idem!.tx.query(`INSERT INTO "${schema}".orders (via, body) VALUES ('node', $1)`, [
        JSON.stringify(req.body ?? null),
      ]);
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ ok: true }));
    },
  });
  const node = createServer((req, res) => void handler(req, res));

  const app: FastifyInstance = Fastify({ logger: false });
  await app.register(idempotency, { idem, tenant: () => 'acme', maxBodyBytes: 256 * 1024, events });
  app.post('/orders', async (request, reply) => {
    await request.idem!.tx.query(`INSERT INTO "${schema}".orders (via, body) VALUES ('fastify', $1)`, [
      JSON.stringify(request.body ?? null),
    ]);
    return reply.code(201).send({ ok: true });
  });
  await app.listen({ port: 0, host: '127.0.0.1' });

  const receiver = createWebhookReceiver({
    sql: fromPg(pool),
    schema,
    sources: { billing: createStandardWebhooksVerifier({ secrets: [webhookSecret] }) },
    maxBodyBytes: 64 * 1024,
    events,
  });
  const webhook = createServer(
    (req, res) => void nodeWebhooks({ receiver: receiver, source: 'billing' })(req, res),
  );

  const [nodePort, webhookPort] = await Promise.all([listen(node), listen(webhook)]);
  const fastifyPort = (app.server.address() as AddressInfo).port;
  return {
    db,
    nodePort,
    fastifyPort,
    webhookPort,
    logged,
    async counts() {
      const { rows } = await pool.query<Counts>(
        `SELECT (SELECT count(*)::int FROM "${schema}".orders) AS orders,
                (SELECT count(*)::int FROM "${schema}".requests) AS requests,
                (SELECT count(*)::int FROM "${schema}".webhook_receipts) AS receipts`,
      );
      return rows[0]!;
    },
    async close() {
      await app.close();
      await new Promise<void>((resolve) => node.close(() => resolve()));
      await new Promise<void>((resolve) => webhook.close(() => resolve()));
      await db.close();
    },
  };
}

/** The two HTTP surfaces a hostile property runs on, for `describe.each`: each one's port in `s()`. */
export function surfacesOf(s: () => Surfaces): { name: string; port: () => number }[] {
  return [
    { name: 'node:http', port: () => s().nodePort },
    { name: 'fastify', port: () => s().fastifyPort },
  ];
}
