/**
 * Test support for webhooks: signers for every scheme (the Standard Webhooks `v1` signer is the
 * `standardwebhooks` npm package, the reference), real servers for every framework on 127.0.0.1, a
 * channel that keeps every event, and row counts.
 */
import { createHmac, generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import type pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { createEvents, type IdemEventMap, type IdemEventName, type IdemEvents } from '../../src/index.js';
import { fromPg, type PgClientLike } from '../../src/adapters/pg.js';
import type { Clock } from '../../src/core/clock.js';
import {
  createWebhookProcessor,
  type WebhookHandlers,
  type WebhookProcessor,
  type WebhookProcessorOptions,
  type WebhookReceiver,
} from '../../src/webhooks/index.js';
import { webhooks as expressWebhooks } from '../../src/webhooks/express.js';
import { webhooks as honoWebhooks } from '../../src/webhooks/hono.js';
import { webhooks as nodeWebhooks } from '../../src/webhooks/node-http.js';
import { webhooks as fastifyWebhooks } from '../../src/webhooks/fastify.js';

export type Framework = 'express' | 'fastify' | 'hono' | 'node';
export const frameworks: Framework[] = ['express', 'fastify', 'hono', 'node'];

/** A running server with one POST route per source at `/hooks/<source>`. */
export interface TestServer {
  url: string;
  close(): Promise<void>;
}

/** Starts `framework` on 127.0.0.1 with one route per receiver source. */
export async function startServer(framework: Framework, receiver: WebhookReceiver): Promise<TestServer> {
  const sources = receiver.sourceNames();
  if (framework === 'express') {
    const app = express();
    for (const source of sources)
      app.post(`/hooks/${source}`, expressWebhooks({ receiver: receiver, source: source }));
    return listenNode(createServer(app));
  }
  if (framework === 'node') {
    const handlers = new Map(
      sources.map((s) => [`/hooks/${s}`, nodeWebhooks({ receiver: receiver, source: s })]),
    );
    return listenNode(
      createServer((req, res) => {
        const handler = handlers.get(req.url ?? '');
        if (!handler) {
          res.writeHead(404).end();
          return;
        }
        handler(req, res).catch((error: unknown) => {
          res.writeHead(500).end(String(error));
        });
      }),
    );
  }
  if (framework === 'fastify') {
    const app = Fastify();
    await app.register(
      fastifyWebhooks({
        routes: Object.fromEntries(sources.map((s) => [`/hooks/${s}`, s])),
        receiver: receiver,
      }),
    );
    await app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = app.server.address() as AddressInfo;
    return { url: `http://127.0.0.1:${port}`, close: () => app.close() };
  }
  const app = new Hono();
  for (const source of sources)
    app.post(`/hooks/${source}`, honoWebhooks({ receiver: receiver, source: source }));
  const server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }) as Server;
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => closeNode(server) };
}

export async function listenNode(server: Server): Promise<TestServer> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => closeNode(server) };
}

export function closeNode(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve, reject) => server.close((e) => (e ? reject(e) : resolve())));
}

/** A signed request: headers and exact body bytes. */
export interface SignedRequest {
  headers: Record<string, string>;
  body: Uint8Array;
}

/** POSTs a signed request and returns status, content type and body text. */
export async function post(
  url: string,
  request: SignedRequest,
): Promise<{ status: number; contentType: string | null; body: string }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: request.headers,
    body: request.body as Uint8Array<ArrayBuffer>,
  });
  return {
    status: response.status,
    contentType: response.headers.get('content-type'),
    body: await response.text(),
  };
}

// --- signers -------------------------------------------------------------------------------------

export const standardSecret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
export const standardSecretNext = 'whsec_Y2hhbmdlZC1zZWNyZXQtZm9yLXJvdGF0aW9uIQ==';

/** Standard Webhooks v1, signed by the `standardwebhooks` npm package (the reference). */
export function signStandard(options: {
  id: string;
  body: string;
  secret?: string;
  timestampMs: number;
  extraSignatures?: string[];
}): SignedRequest {
  const webhook = new Webhook(options.secret ?? standardSecret);
  const signature = webhook.sign(options.id, new Date(options.timestampMs), options.body);
  return {
    headers: {
      'content-type': 'application/json',
      'webhook-id': options.id,
      'webhook-timestamp': String(Math.floor(options.timestampMs / 1000)),
      'webhook-signature': [signature, ...(options.extraSignatures ?? [])].join(' '),
    },
    body: Buffer.from(options.body, 'utf8'),
  };
}

/** An ed25519 pair as Standard Webhooks writes it. */
export function ed25519Pair(): { privateKey: KeyObject; publicKey: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const raw = publicKey.export({ format: 'der', type: 'spki' }).subarray(12);
  return { privateKey, publicKey: `whpk_${raw.toString('base64')}` };
}

/** Standard Webhooks v1a (ed25519), over exact bytes. */
export function signStandardV1a(options: {
  id: string;
  body: Uint8Array;
  privateKey: KeyObject;
  timestampMs: number;
}): SignedRequest {
  const ts = String(Math.floor(options.timestampMs / 1000));
  const content = Buffer.concat([Buffer.from(`${options.id}.${ts}.`), options.body]);
  return {
    headers: {
      'content-type': 'application/octet-stream',
      'webhook-id': options.id,
      'webhook-timestamp': ts,
      'webhook-signature': `v1a,${sign(null, content, options.privateKey).toString('base64')}`,
    },
    body: options.body,
  };
}

export const githubSecret = 'It’s a Secret to Everybody';

/** GitHub's X-Hub-Signature-256, as GitHub computes it. */
export function signGithub(options: {
  delivery: string;
  hookId: string;
  event: string;
  body: string;
  secret?: string;
}): SignedRequest {
  const body = Buffer.from(options.body, 'utf8');
  const mac = createHmac('sha256', options.secret ?? githubSecret)
    .update(body)
    .digest('hex');
  return {
    headers: {
      'content-type': 'application/json',
      'x-github-delivery': options.delivery,
      'x-github-hook-id': options.hookId,
      'x-github-event': options.event,
      'x-hub-signature-256': `sha256=${mac}`,
    },
    body,
  };
}

export const stripeSecret = 'whsec_test_stripe_endpoint_secret';

/** Stripe-Signature, as Stripe's libraries compute it (the secret used as text). */
export function signStripe(options: {
  body: string;
  timestampMs: number;
  secrets?: string[];
}): SignedRequest {
  const t = Math.floor(options.timestampMs / 1000);
  const v1 = (options.secrets ?? [stripeSecret]).map(
    (secret) => `v1=${createHmac('sha256', secret).update(`${t}.${options.body}`).digest('hex')}`,
  );
  return {
    headers: { 'content-type': 'application/json', 'stripe-signature': [`t=${t}`, ...v1].join(',') },
    body: Buffer.from(options.body, 'utf8'),
  };
}

export const hmacSecret = 'generic-sender-secret';

/** The generic scheme the tests configure: X-Signature: sha512=<base64 of HMAC(ts.body)>. */
export function signGeneric(options: {
  id: string;
  body: string;
  timestampMs: number;
  event?: string;
  secret?: string;
}): SignedRequest {
  const ts = String(Math.floor(options.timestampMs / 1000));
  const mac = createHmac('sha512', options.secret ?? hmacSecret)
    .update(`${ts}.${options.body}`)
    .digest('base64');
  return {
    headers: {
      'content-type': 'application/json',
      'x-delivery-id': options.id,
      'x-event-type': options.event ?? 'thing.happened',
      'x-timestamp': ts,
      'x-signature': `sha512=${mac}`,
    },
    body: Buffer.from(options.body, 'utf8'),
  };
}

// --- observation ---------------------------------------------------------------------------------

/** Every event the webhook receiver, processor and sender emit, and `error`. */
export const webhookEventNames = [
  'error',
  'webhook:received',
  'webhook:rejected',
  'webhook:processed',
  'webhook:retried',
  'webhook:dead',
  'webhook:superseded',
  'webhook:parked',
  'webhook:redriven',
  'webhook:discarded',
  'webhook:gap-skipped',
  'webhook:delivered',
  'webhook:delivery-failed',
  'webhook:endpoint-disabled',
] as const satisfies readonly IdemEventName[];

/** One event as kept: its name and payload. */
export type Kept = {
  [K in (typeof webhookEventNames)[number]]: { name: K; event: IdemEventMap[K] };
}[(typeof webhookEventNames)[number]];

/**
 * A channel that keeps every webhook event (and every `error`, so none reaches stderr), with each
 * as a line of text for searching (an error as its name and message).
 */
export function capturingEvents(): {
  events: IdemEvents;
  kept: Kept[];
  lines: string[];
  of<K extends Kept['name']>(name: K): IdemEventMap[K][];
} {
  const events = createEvents();
  const kept: Kept[] = [];
  const lines: string[] = [];
  for (const name of webhookEventNames) {
    events.on(name, (event: IdemEventMap[typeof name]) => {
      kept.push({ name, event } as Kept);
      lines.push(
        JSON.stringify({ name, ...event }, (_key, value: unknown) =>
          value instanceof Error ? `${value.name}: ${value.message}` : value,
        ),
      );
    });
  }
  const of = <K extends Kept['name']>(name: K) =>
    kept.filter((k) => k.name === name).map((k) => k.event as IdemEventMap[K]);
  return { events, kept, lines, of };
}

/** A channel whose `error` events are dropped: for tests whose failures are the point. */
export { quietEvents } from '../support/events.js';

/** Row count of one of idem's tables. */
export async function count(pool: pg.Pool, schema: string, table: string, where = 'true'): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(
    `SELECT count(*) AS n FROM "${schema}".${table} WHERE ${where}`,
  );
  return Number(rows[0]!.n);
}

/**
 * A webhook processor on the test schema's pool, with a deterministic clock and jitter (`random`
 * fixed at 0.5), as the processor and ordering suites run theirs.
 */
export function testProcessor(
  db: { pool: pg.Pool; schema: string },
  clock: Clock,
  handlers: WebhookHandlers<PgClientLike>,
  options: Partial<WebhookProcessorOptions<PgClientLike>> = {},
): WebhookProcessor<PgClientLike> {
  return createWebhookProcessor({
    sql: fromPg(db.pool),
    schema: db.schema,
    clock,
    random: () => 0.5,
    handlers,
    ...options,
  });
}

/**
 * After each sender test: closes the endpoints' servers it started and empties the sender's
 * tables, so the next test counts only its own deliveries.
 */
export async function resetSender(
  db: { pool: pg.Pool; schema: string },
  servers: TestServer[],
): Promise<void> {
  for (const server of servers.splice(0)) await server.close();
  await db.pool.query(
    `DELETE FROM "${db.schema}".webhook_messages; DELETE FROM "${db.schema}".webhook_endpoints`,
  );
}
