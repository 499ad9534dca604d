/**
 * The receiver over real HTTP on 127.0.0.1, through Express, Fastify, Hono and node:http, on a real
 * PostgreSQL. Seed scenario 5 (a replayed delivery with the same id has one effect) through every
 * verifier; every bad input answered with its status and nothing stored; raw bodies that a parser
 * consumed fail loudly; no secret or signature in any log line or error body.
 */
import { serve } from '@hono/node-server';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg, type PgClientLike } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import {
  createWebhookProcessor,
  createWebhookReceiver,
  createGithubVerifier,
  createHmacVerifier,
  createStandardWebhooksVerifier,
  createStripeVerifier,
  type WebhookProcessor,
  type WebhookReceiver,
} from '../../src/webhooks/index.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import {
  capturingEvents,
  closeNode,
  count,
  frameworks,
  githubSecret,
  hmacSecret,
  listenNode,
  post,
  signGeneric,
  signGithub,
  signStandard,
  signStripe,
  standardSecret,
  startServer,
  stripeSecret,
  type Framework,
  type SignedRequest,
  type TestServer,
} from './support.js';
import { webhooks as expressWebhooks } from '../../src/webhooks/express.js';
import { webhooks as honoWebhooks } from '../../src/webhooks/hono.js';
import {
  webhookHandler as fastifyWebhookHandler,
  webhooks as fastifyWebhooks,
} from '../../src/webhooks/fastify.js';

const clock = new ManualClock(Date.UTC(2030, 0, 1, 12));
const captured = capturingEvents();
const { events } = captured;
const bodies: string[] = [];
let db: TestSchema;
let receiver: WebhookReceiver;
let processor: WebhookProcessor<PgClientLike>;
const servers = new Map<Framework, TestServer>();

type Source = 'standard' | 'github' | 'stripe' | 'generic';
const sources: Source[] = ['standard', 'github', 'stripe', 'generic'];
const maxBodyBytes = 4096;

/** A signed delivery of `source` whose dedupe id is derived from `id`. */
function signed(source: Source, id: string, type = 'thing.happened'): SignedRequest {
  const body = JSON.stringify({ id, type, data: { n: 1 } });
  const timestampMs = clock.now();
  if (source === 'standard') return signStandard({ id, body, timestampMs });
  if (source === 'github') return signGithub({ delivery: id, hookId: '42', event: type, body });
  if (source === 'stripe') return signStripe({ body, timestampMs });
  return signGeneric({ id, body, timestampMs, event: type });
}

async function send(framework: Framework, source: Source, request: SignedRequest) {
  const answer = await post(`${servers.get(framework)!.url}/hooks/${source}`, request);
  bodies.push(answer.body);
  return answer;
}

const receipts = (where = 'true') => count(db.pool, db.schema, 'webhook_receipts', where);
const effects = async (deliveryId: string) => {
  const { rows } = await db.pool.query<{ n: string }>(
    `SELECT count(*) AS n FROM "${db.schema}".effects WHERE delivery_id = $1`,
    [deliveryId],
  );
  return Number(rows[0]!.n);
};

beforeAll(async () => {
  db = await createTestSchema();
  await db.pool.query(
    `CREATE TABLE "${db.schema}".effects (source text NOT NULL, delivery_id text NOT NULL)`,
  );
  receiver = createWebhookReceiver({
    sql: fromPg(db.pool),
    schema: db.schema,
    clock,
    events,
    maxBodyBytes,
    sources: {
      standard: createStandardWebhooksVerifier({ secrets: [standardSecret] }),
      github: createGithubVerifier({ secrets: [githubSecret] }),
      stripe: createStripeVerifier({ secrets: [stripeSecret] }),
      generic: createHmacVerifier({
        secrets: [hmacSecret],
        header: 'x-signature',
        algorithm: 'sha512',
        encoding: 'base64',
        prefix: 'sha512=',
        deliveryIdHeader: 'x-delivery-id',
        eventTypeHeader: 'x-event-type',
        timestamp: { header: 'x-timestamp' },
      }),
    },
  });
  const effect = {
    'thing.happened': async (
      tx: { query: (q: string, p: unknown[]) => Promise<unknown> },
      event: { source: string; deliveryId: string },
    ) => {
      await tx.query(`INSERT INTO "${db.schema}".effects (source, delivery_id) VALUES ($1, $2)`, [
        event.source,
        event.deliveryId,
      ]);
    },
  };
  processor = createWebhookProcessor({
    sql: fromPg(db.pool),
    schema: db.schema,
    clock,
    events,
    handlers: { standard: effect, github: effect, stripe: effect, generic: effect },
  });
  for (const framework of frameworks) servers.set(framework, await startServer(framework, receiver));
});

afterAll(async () => {
  for (const server of servers.values()) await server.close();
  await db?.close();
});

describe.each(frameworks)('%s', (framework) => {
  describe.each(sources)('%s verifier', (source) => {
    it('seed scenario 5: a replayed delivery with the same id is stored once and has one effect', async () => {
      const id = `${framework}-${source}-replay`;
      const request = signed(source, id);
      const dedupeId = source === 'github' ? `42:${id}` : id;
      const seen = captured.kept.length;

      const first = await send(framework, source, request);
      expect(first.status).toBe(202);
      expect(JSON.parse(first.body)).toEqual({ received: true, duplicate: false });
      // Replays: one after another, then five at once.
      const again = await send(framework, source, request);
      expect(again.status).toBe(200);
      expect(JSON.parse(again.body)).toEqual({ received: true, duplicate: true });
      const concurrent = await Promise.all(Array.from({ length: 5 }, () => send(framework, source, request)));
      expect(concurrent.map((a) => a.status)).toEqual([200, 200, 200, 200, 200]);
      expect(await receipts(`source = '${source}' AND delivery_id = '${dedupeId}'`)).toBe(1);
      // One event per answer, after its statement: the first stored, every replay a duplicate.
      const received = captured.kept
        .slice(seen)
        .filter((k) => k.name === 'webhook:received')
        .map((k) => k.event);
      expect(received).toHaveLength(7);
      expect(received[0]).toMatchObject({ tenant: '', source, deliveryId: dedupeId, duplicate: false });
      expect(received.slice(1).every((e) => e.deliveryId === dedupeId && e.duplicate)).toBe(true);

      await processor.drain();
      expect(await effects(dedupeId)).toBe(1);
      // A replay after processing: acknowledged, no new work.
      expect((await send(framework, source, request)).status).toBe(200);
      expect(await receipts(`delivery_id = '${dedupeId}' AND state <> 'applied'`)).toBe(0);
      await processor.drain();
      expect(await effects(dedupeId)).toBe(1);
    });

    it('missing or wrong signature is 401, malformed headers 400, nothing stored', async () => {
      const before = await receipts();
      const seen = captured.kept.length;
      const request = signed(source, `${framework}-${source}-bad`);
      const signatureHeader = {
        standard: 'webhook-signature',
        github: 'x-hub-signature-256',
        stripe: 'stripe-signature',
        generic: 'x-signature',
      }[source];
      const { [signatureHeader]: signature, ...unsigned } = request.headers;

      const missing = await send(framework, source, { ...request, headers: unsigned });
      expect(missing.status).toBe(401);
      expect(missing.contentType).toBe('application/problem+json');
      expect(JSON.parse(missing.body)).toMatchObject({
        status: 401,
        code: 'IDEM_WEBHOOK_UNAUTHORIZED',
        reason: 'signature-missing',
      });

      const tampered = await send(framework, source, {
        ...request,
        body: Buffer.from(request.body.toString() + ' '),
      });
      expect(tampered.status).toBe(401);
      expect(JSON.parse(tampered.body)).toMatchObject({ reason: 'signature-mismatch' });

      const malformedHeaders: Record<string, string> = {
        standard: { 'webhook-timestamp': 'yesterday' },
        github: { 'x-hub-signature-256': 'md5=0' },
        stripe: { 'stripe-signature': 'nonsense' },
        generic: { 'x-timestamp': 'soon' },
      }[source];
      const malformed = await send(framework, source, {
        ...request,
        headers: { ...request.headers, ...malformedHeaders },
      });
      expect(malformed.status).toBe(400);
      expect(malformed.contentType).toBe('application/problem+json');
      expect(JSON.parse(malformed.body)).toMatchObject({ status: 400, code: 'IDEM_WEBHOOK_MALFORMED' });
      expect(signature).toBeDefined();
      expect(await receipts()).toBe(before);
      // Each refusal is reported with the metric's reason; none is an error.
      expect(captured.kept.slice(seen).map((k) => k.name)).toEqual([
        'webhook:rejected',
        'webhook:rejected',
        'webhook:rejected',
      ]);
      expect(captured.kept.slice(seen).map((k) => k.event)).toEqual([
        expect.objectContaining({ source, reason: 'signature', status: 401, detail: 'signature-missing' }),
        expect.objectContaining({ source, reason: 'signature', status: 401, detail: 'signature-mismatch' }),
        expect.objectContaining({ source, reason: 'malformed', status: 400, code: 'IDEM_WEBHOOK_MALFORMED' }),
      ]);
    });
  });

  it('timestamps outside the tolerance, past or future, are 401 and nothing is stored', async () => {
    const before = await receipts();
    const seen = captured.kept.length;
    for (const offset of [-301_000, 301_000]) {
      for (const request of [
        signStandard({ id: `${framework}-old-${offset}`, body: '{}', timestampMs: clock.now() + offset }),
      ]) {
        const answer = await send(framework, 'standard', request);
        expect(answer.status).toBe(401);
        expect((JSON.parse(answer.body) as { reason: string }).reason).toBe(
          offset < 0 ? 'timestamp-too-old' : 'timestamp-too-new',
        );
      }
      const stripe = await send(
        framework,
        'stripe',
        signStripe({ body: '{"id":"evt_t"}', timestampMs: clock.now() + offset }),
      );
      expect(stripe.status).toBe(401);
      const generic = await send(
        framework,
        'generic',
        signGeneric({ id: 'g-t', body: '{}', timestampMs: clock.now() + offset }),
      );
      expect(generic.status).toBe(401);
    }
    expect(await receipts()).toBe(before);
    const rejected = captured.of('webhook:rejected').slice(-6);
    expect(captured.kept.length - seen).toBe(6);
    expect(rejected.map((e) => [e.reason, e.detail])).toEqual([
      ['timestamp', 'timestamp-too-old'],
      ['timestamp', 'timestamp-too-old'],
      ['timestamp', 'timestamp-too-old'],
      ['timestamp', 'timestamp-too-new'],
      ['timestamp', 'timestamp-too-new'],
      ['timestamp', 'timestamp-too-new'],
    ]);
  });

  it('a body over the limit is 413 and nothing is stored', async () => {
    const before = await receipts();
    const big = JSON.stringify({ type: 'thing.happened', pad: 'x'.repeat(maxBodyBytes) });
    const answer = await send(
      framework,
      'standard',
      signStandard({ id: `${framework}-big`, body: big, timestampMs: clock.now() }),
    );
    expect(answer.status).toBe(413);
    expect(answer.contentType).toBe('application/problem+json');
    expect(JSON.parse(answer.body)).toMatchObject({ status: 413, code: 'IDEM_WEBHOOK_TOO_LARGE' });
    expect(await receipts()).toBe(before);
    expect(captured.of('webhook:rejected').at(-1)).toMatchObject({
      source: 'standard',
      reason: 'too-large',
      status: 413,
    });
  });

  it('verifies the exact bytes whatever the content type, or without one', async () => {
    for (const [i, contentType] of [undefined, 'text/plain', 'application/x-www-form-urlencoded'].entries()) {
      const request = signStandard({
        id: `${framework}-ct-${i}`,
        body: '{"type":"x", "a" : 1 }',
        timestampMs: clock.now(),
      });
      const { 'content-type': _ignored, ...headers } = request.headers;
      const answer = await send(framework, 'standard', {
        ...request,
        headers: contentType ? { ...headers, 'content-type': contentType } : headers,
      });
      expect(answer.status).toBe(202);
    }
  });

  it('an unknown event type is stored, acknowledged, and recorded as unhandled', async () => {
    const id = `${framework}-unknown-type`;
    const answer = await send(framework, 'standard', signed('standard', id, 'never.heard.of'));
    expect(answer.status).toBe(202);
    expect(await receipts(`delivery_id = '${id}' AND event_type = 'never.heard.of'`)).toBe(1);
    await processor.drain();
    expect(await receipts(`delivery_id = '${id}' AND state = 'unhandled'`)).toBe(1);
    expect(await effects(id)).toBe(0);
  });
});

describe('the stored receipt', () => {
  it('keeps the exact bytes and the chosen headers, never a signature header', async () => {
    const request = signGithub({
      delivery: 'stored-1',
      hookId: '42',
      event: 'push',
      body: '{"b": [1, 2 ,3]}\n',
    });
    expect((await send('express', 'github', request)).status).toBe(202);
    const { rows } = await db.pool.query(
      `SELECT body, headers, event_type, received_at, expires_at FROM "${db.schema}".webhook_receipts
       WHERE source = 'github' AND delivery_id = '42:stored-1'`,
    );
    const row = rows[0] as {
      body: Buffer;
      headers: Record<string, string>;
      event_type: string;
      received_at: Date;
      expires_at: Date;
    };
    expect(Buffer.compare(row.body, Buffer.from(request.body))).toBe(0);
    expect(row.headers).toMatchObject({
      'x-github-delivery': 'stored-1',
      'x-github-hook-id': '42',
      'x-github-event': 'push',
    });
    expect(row.headers['x-hub-signature-256']).toBeUndefined();
    expect(row.event_type).toBe('push');
    // GitHub default retention: 4 days (3-day redelivery window plus margin).
    expect(row.expires_at.getTime() - row.received_at.getTime()).toBe(4 * 86_400_000);
  });

  it('a database failure answers 503 with Retry-After: the sender will deliver again', async () => {
    const broken = createWebhookReceiver({
      sql: fromPg(db.pool),
      schema: 'idem_no_such_schema',
      clock,
      events,
      sources: { standard: createStandardWebhooksVerifier({ secrets: [standardSecret] }) },
    });
    const answer = await broken.receive('standard', {
      headers: {
        get: (name) => signStandard({ id: 'x', body: '{}', timestampMs: clock.now() }).headers[name],
      },
      body: Buffer.from('{}'),
    });
    expect(answer.status).toBe(503);
    expect(answer.headers['retry-after']).toBe('5');
    expect(JSON.parse(answer.body)).toMatchObject({ status: 503 });
    const error = captured.of('error').at(-1)!;
    expect(error).toMatchObject({ source: 'webhook-receiver', where: 'store' });
    expect((error.error as { code?: string }).code).toBe('42P01'); // the schema does not exist
  });
});

describe('raw body already consumed by a parser', () => {
  async function listenHono(app: Hono): Promise<TestServer> {
    const server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }) as Server;
    await once(server, 'listening');
    return {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      close: () => closeNode(server),
    };
  }

  async function expectLoudFailure(url: string, id: string) {
    const seen = captured.kept.length;
    const answer = await post(
      url,
      signStandard({ id, body: '{"type":"thing.happened"}', timestampMs: clock.now() }),
    );
    bodies.push(answer.body);
    expect(answer.status).toBe(500);
    expect(answer.contentType).toBe('application/problem+json');
    expect(JSON.parse(answer.body)).toMatchObject({ code: 'IDEM_WEBHOOK_RAW_BODY' });
    const reported = captured.kept.slice(seen);
    expect(reported).toContainEqual({
      name: 'webhook:rejected',
      event: expect.objectContaining({
        reason: 'raw-body-unavailable',
        status: 500,
        code: 'IDEM_WEBHOOK_RAW_BODY',
      }) as unknown,
    });
    // Loud: also an error, which reaches stderr when nobody listens.
    expect(reported).toContainEqual({
      name: 'error',
      event: expect.objectContaining({ source: 'webhook-receiver', where: 'raw-body' }) as unknown,
    });
    expect(await receipts(`delivery_id = '${id}'`)).toBe(0);
  }

  it('Express: express.json() first fails loudly; express.raw() first is fine', async () => {
    const app = express();
    app.post('/json', express.json(), expressWebhooks({ receiver: receiver, source: 'standard' }));
    app.post(
      '/text',
      express.text({ type: '*/*' }),
      expressWebhooks({ receiver: receiver, source: 'standard' }),
    );
    app.post(
      '/raw',
      express.raw({ type: '*/*' }),
      expressWebhooks({ receiver: receiver, source: 'standard' }),
    );
    const server = await listenNode(createServer(app));
    try {
      await expectLoudFailure(`${server.url}/json`, 'express-json');
      await expectLoudFailure(`${server.url}/text`, 'express-text');
      const raw = await post(
        `${server.url}/raw`,
        signStandard({ id: 'express-raw', body: '{"a":1}', timestampMs: clock.now() }),
      );
      expect(raw.status).toBe(202);
    } finally {
      await server.close();
    }
  });

  it('Fastify: a route behind the JSON parser fails loudly', async () => {
    const app = Fastify();
    app.post('/json', fastifyWebhookHandler({ receiver: receiver, source: 'standard' }));
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      await expectLoudFailure(
        `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/json`,
        'fastify-json',
      );
    } finally {
      await app.close();
    }
  });

  it('Hono: a middleware that read c.req.json() first fails loudly; one that read arrayBuffer() is fine', async () => {
    const app = new Hono();
    app.post('/json', async (c, next) => {
      await c.req.json();
      await next();
    });
    app.post('/json', honoWebhooks({ receiver: receiver, source: 'standard' }));
    app.post('/bytes', async (c, next) => {
      await c.req.arrayBuffer();
      await next();
    });
    app.post('/bytes', honoWebhooks({ receiver: receiver, source: 'standard' }));
    const server = await listenHono(app);
    try {
      await expectLoudFailure(`${server.url}/json`, 'hono-json');
      const bytes = await post(
        `${server.url}/bytes`,
        signStandard({ id: 'hono-bytes', body: '{"a": 1}', timestampMs: clock.now() }),
      );
      expect(bytes.status).toBe(202);
    } finally {
      await server.close();
    }
  });
});

describe('secrets and signatures', () => {
  it('never appear in a log line or an error body', async () => {
    // More rejected and accepted traffic, so every log path has run.
    const request = signStandard({
      id: 'secret-check',
      body: '{"type":"thing.happened"}',
      timestampMs: clock.now(),
    });
    await send('node', 'standard', { ...request, body: Buffer.from('{"type":"other"}') });
    await send('node', 'standard', request);
    await send('node', 'standard', request);
    await send(
      'fastify',
      'github',
      signGithub({ delivery: 'sc', hookId: '1', event: 'push', body: '{}', secret: 'wrong' }),
    );

    const secrets = [
      standardSecret,
      standardSecret.slice(6),
      Buffer.from(standardSecret.slice(6), 'base64').toString('hex'),
      githubSecret,
      stripeSecret,
      hmacSecret,
    ];
    const signatures = [
      request.headers['webhook-signature']!,
      request.headers['webhook-signature']!.split(',')[1]!,
      signGithub({ delivery: 'sc', hookId: '1', event: 'push', body: '{}', secret: 'wrong' }).headers[
        'x-hub-signature-256'
      ]!,
    ];
    const everything = [...captured.lines, ...bodies].join('\n');
    expect(captured.lines.length).toBeGreaterThan(20);
    expect(bodies.length).toBeGreaterThan(50);
    for (const needle of [...secrets, ...signatures]) expect(everything).not.toContain(needle);
    // The stored headers hold no signature either.
    const { rows } = await db.pool.query(`SELECT headers::text AS h FROM "${db.schema}".webhook_receipts`);
    const stored = rows.map((r: { h: string }) => r.h).join('\n');
    for (const header of ['webhook-signature', 'x-hub-signature-256', 'stripe-signature', 'x-signature"']) {
      expect(stored).not.toContain(header);
    }
  });
});

describe('fastifyWebhooks and the server’s body limit', () => {
  it('never raises it: a server limit below the receiver’s is the one that applies (413, nothing stored)', async () => {
    const serverLimit = 2048; // the receiver's is 4096
    const app = Fastify({ bodyLimit: serverLimit });
    await app.register(fastifyWebhooks({ routes: { '/hooks/standard': 'standard' }, receiver: receiver }));
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const before = await receipts();
      const body = JSON.stringify({ type: 'thing.happened', pad: 'x'.repeat(3000) });
      const answer = await post(
        `${url}/hooks/standard`,
        signStandard({ id: 'fastify-server-limit', body, timestampMs: clock.now() }),
      );
      expect(answer.status).toBe(413);
      const problem = JSON.parse(answer.body) as { code: string; detail: string };
      expect(problem.code).toBe('IDEM_WEBHOOK_TOO_LARGE');
      expect(problem.detail).toContain(String(serverLimit));
      expect(await receipts()).toBe(before);
    } finally {
      await app.close();
    }
  });
});
