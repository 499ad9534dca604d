/**
 * The integrations never loosen a limit the application set: the body limit in force is the
 * smaller of the framework's (server, route, parser, body-parser or middleware) and idem's
 * `maxBodyBytes`, with and without a declared length. And the fingerprint is taken over the body
 * as received, so Fastify's schema coercion, defaults and removal of unknown properties never turn
 * two different requests into one. Real servers on 127.0.0.1, real PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import express from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import { Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { idempotency as expressIdempotency } from 'idem/express';
import { idempotency as fastifyIdempotency } from 'idem/fastify';
import { idempotency as honoIdempotency, type IdemVariables } from 'idem/hono';
import { idempotency as nodeIdempotency } from 'idem/node-http';
import { createIdem, type Idem } from 'idem';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { client, type Sent } from '../support/http/client.js';

let db: TestSchema;
let idem: Idem;
let handled = 0;
const closers: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  db = await createTestSchema();
  idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, waitMs: 500 });
});
afterAll(async () => {
  for (const close of closers.reverse()) await close();
  await db?.close();
});

const keyed = () => `lim-${randomUUID()}`;
const requestRows = async () =>
  (await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".requests`)).rows[0]!.n;
/** A JSON string body of exactly `size` bytes. */
const jsonOfSize = (size: number) => `"${'a'.repeat(size - 2)}"`;

function urlOf(server: Server): string {
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function listenNode(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return urlOf(server);
}

async function listenFastify(app: FastifyInstance): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' });
  closers.push(() => app.close());
  return urlOf(app.server);
}

/** Sends `size` bytes, declared and streamed; expects `status` both ways and nothing stored when refused. */
async function expectBodyAnswer(url: string, path: string, size: number, status: number): Promise<Sent[]> {
  const send = client(url);
  const answers: Sent[] = [];
  for (const chunked of [false, true]) {
    const before = { rows: await requestRows(), handled };
    const answer = await send(path, { key: keyed(), body: jsonOfSize(size), chunked });
    expect(answer.status, `${size} bytes, ${chunked ? 'streamed' : 'declared'}`).toBe(status);
    if (status >= 400) {
      expect(await requestRows()).toBe(before.rows);
      expect(handled).toBe(before.handled);
    }
    answers.push(answer);
  }
  return answers;
}

describe('Fastify', () => {
  it("keeps the server's bodyLimit when it is below maxBodyBytes (the plugin never raises it)", async () => {
    const app = Fastify({ bodyLimit: 64 * 1024 });
    await app.register(fastifyIdempotency, { idem, tenant: () => 'acme' });
    app.post('/orders', async (_request, reply) => {
      handled++;
      return reply.code(201).send({ ok: true });
    });
    const url = await listenFastify(app);
    await expectBodyAnswer(url, '/orders', 64 * 1024, 201);
    const [declared] = await expectBodyAnswer(url, '/orders', 64 * 1024 + 1, 413);
    expect(declared!.header('content-type')).toBe('application/problem+json');
    expect(declared!.json()).toMatchObject({ type: 'urn:idem:problem:body-too-large', status: 413 });
    // 1 MiB, idem's own default: refused, where the plugin used to raise the route's limit to it.
    await expectBodyAnswer(url, '/orders', 1024 * 1024, 413);
  });

  it("keeps a route's own bodyLimit and a content-type parser's own bodyLimit", async () => {
    const app = Fastify({ bodyLimit: 64 * 1024 });
    app.addContentTypeParser(
      'application/x-small',
      { parseAs: 'string', bodyLimit: 1024 },
      (_r, body, done) => done(null, body),
    );
    await app.register(fastifyIdempotency, { idem, tenant: () => 'acme' });
    const ok = async (_request: unknown, reply: { code(n: number): { send(b: unknown): unknown } }) => {
      handled++;
      return reply.code(201).send({ ok: true });
    };
    app.post('/small', { bodyLimit: 8 * 1024 }, ok);
    app.post('/parser', ok);
    const url = await listenFastify(app);
    await expectBodyAnswer(url, '/small', 8 * 1024, 201);
    await expectBodyAnswer(url, '/small', 8 * 1024 + 1, 413);

    const send = client(url);
    for (const chunked of [false, true]) {
      /** A body of `bytes` for the parser whose own limit is 1024. */
      const sendToParser = (bytes: number) =>
        send('/parser', {
          key: keyed(),
          body: 'x'.repeat(bytes),
          contentType: 'application/x-small',
          chunked,
        });
      const before = { rows: await requestRows(), handled };
      expect((await sendToParser(1024)).status).toBe(201);
      expect((await sendToParser(1025)).status).toBe(413);
      expect(await requestRows()).toBe(before.rows + 1);
      expect(handled).toBe(before.handled + 1);
    }
  });

  it('applies maxBodyBytes when it is the smaller limit, declared or streamed', async () => {
    const app = Fastify({ bodyLimit: 64 * 1024 });
    await app.register(fastifyIdempotency, { idem, tenant: () => 'acme', maxBodyBytes: 4096 });
    app.post('/orders', async (_request, reply) => {
      handled++;
      return reply.code(201).send({ ok: true });
    });
    const url = await listenFastify(app);
    await expectBodyAnswer(url, '/orders', 4096, 201);
    const answers = await expectBodyAnswer(url, '/orders', 4097, 413);
    for (const answer of answers) {
      const problem = answer.json<{ type: string; detail: string }>();
      expect(problem.type).toBe('urn:idem:problem:body-too-large');
      expect(problem.detail).toContain('4096 bytes');
    }
  });

  describe('fingerprint over the body as received, not as the schema changed it', () => {
    let send: ReturnType<typeof client>;
    beforeAll(async () => {
      // Fastify's default validator: coerceTypes, useDefaults and removeAdditional all on.
      const app = Fastify();
      await app.register(fastifyIdempotency, { idem, tenant: () => 'acme' });
      app.post<{ Body: { amount: number; currency: string } }>(
        '/charges',
        {
          schema: {
            body: {
              type: 'object',
              required: ['amount'],
              additionalProperties: false,
              properties: { amount: { type: 'integer' }, currency: { type: 'string', default: 'eur' } },
            },
          },
        },
        async (request, reply) => {
          handled++;
          return reply.code(201).send({ seen: request.body });
        },
      );
      send = client(await listenFastify(app));
    });

    it('a coerced field: "12" then 12 is a 422, though the handler saw 12 both times', async () => {
      const key = keyed();
      const first = await send('/charges', { key, body: '{"amount":"12"}' });
      expect(first.status).toBe(201);
      expect(first.json()).toEqual({ seen: { amount: 12, currency: 'eur' } });
      expect((await send('/charges', { key, body: '{"amount":"12"}' })).replayed).toBe(true);
      const changed = await send('/charges', { key, body: '{"amount":12}' });
      expect(changed.status).toBe(422);
      expect(changed.json()).toMatchObject({ type: 'urn:idem:problem:key-reused' });
    });

    it('a removed unknown property, or a default made explicit, is another request: 422', async () => {
      const key = keyed();
      expect((await send('/charges', { key, body: '{"amount":5,"note":"a"}' })).status).toBe(201);
      expect((await send('/charges', { key, body: '{"amount":5,"note":"b"}' })).status).toBe(422);
      const other = keyed();
      expect((await send('/charges', { key: other, body: '{"amount":5}' })).status).toBe(201);
      expect((await send('/charges', { key: other, body: '{"amount":5,"currency":"eur"}' })).status).toBe(
        422,
      );
      // Whitespace and key order are still the same request.
      expect((await send('/charges', { key: other, body: '{ "amount" : 5 }' })).replayed).toBe(true);
    });
  });
});

describe('Express', () => {
  it("a body parser's own limit governs what it reads; maxBodyBytes refuses a declared length over it", async () => {
    const app = express();
    const idempotent = expressIdempotency({ idem, tenant: () => 'acme', maxBodyBytes: 8 * 1024 });
    app.post(
      '/parsed',
      express.json({ limit: 1024, strict: false, type: () => true }),
      idempotent,
      (_req, res) => {
        handled++;
        res.status(201).json({ ok: true });
      },
    );
    app.post('/raw', idempotent, (_req, res) => {
      handled++;
      res.status(201).json({ ok: true });
    });
    const url = await listenNode(createServer(app));
    await expectBodyAnswer(url, '/parsed', 1024, 201);
    await expectBodyAnswer(url, '/parsed', 1025, 413); // express.json's refusal: idem's 8 KiB does not loosen it
    await expectBodyAnswer(url, '/raw', 8 * 1024, 201);
    await expectBodyAnswer(url, '/raw', 8 * 1024 + 1, 413);
  });
});

describe('Hono', () => {
  it("hono/body-limit registered before idem keeps its limit; idem's applies when smaller", async () => {
    const app = new Hono<{ Variables: IdemVariables }>();
    app.post(
      '/limited',
      bodyLimit({ maxSize: 1024, onError: (c) => c.text('too large', 413) }),
      honoIdempotency({ idem, tenant: () => 'acme' }),
      (c) => {
        handled++;
        return c.json({ ok: true }, 201);
      },
    );
    app.post('/own', honoIdempotency({ idem, tenant: () => 'acme', maxBodyBytes: 2048 }), (c) => {
      handled++;
      return c.json({ ok: true }, 201);
    });
    const server = await new Promise<Server>((resolve) => {
      const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s as Server));
    });
    closers.push(() => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    });
    const url = urlOf(server);
    await expectBodyAnswer(url, '/limited', 1024, 201);
    await expectBodyAnswer(url, '/limited', 1025, 413);
    await expectBodyAnswer(url, '/own', 2048, 201);
    await expectBodyAnswer(url, '/own', 2049, 413);
  });
});

describe('node:http', () => {
  it('maxBodyBytes is the only body limit (node:http has none): declared or streamed', async () => {
    const handler = nodeIdempotency({
      idem,
      tenant: () => 'acme',
      route: '/orders',
      maxBodyBytes: 2048,
      handler: async (_req, res) => {
        handled++;
        res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}');
      },
    });
    const url = await listenNode(createServer((req, res) => void handler(req, res)));
    await expectBodyAnswer(url, '/orders', 2048, 201);
    await expectBodyAnswer(url, '/orders', 2049, 413);
  });
});
