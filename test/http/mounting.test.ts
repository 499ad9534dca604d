/**
 * The ways the docs say the integrations can be mounted: Express after an app-wide `express.json()`
 * and inside a router, Hono with `app.use('*', …)`, Fastify routes under a prefix. Each must name
 * the operation after the full route pattern and replay.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { serve } from '@hono/node-server';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { idempotency as expressIdempotency } from 'idem/express';
import { idempotency as fastifyIdempotency } from 'idem/fastify';
import { idempotency as honoIdempotency, type IdemVariables } from 'idem/hono';
import { createIdem, type Idem } from 'idem';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { recordings } from '../support/recordings.js';
import { client } from '../support/http/client.js';

describe.each(recordings)('mounting the integrations, recorded at %s', (recording) => {
  let db: TestSchema;
  let idem: Idem;
  const closers: (() => Promise<void> | void)[] = [];
  const urlOf = (server: Server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  beforeAll(async () => {
    db = await createTestSchema({ poolSize: 4 });
    idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, recording });
  });
  afterAll(async () => {
    for (const close of closers) await close();
    await db.close();
  });

  async function expectOperation(baseUrl: string, path: string, operation: string) {
    const send = client(baseUrl);
    const key = `m-${randomBytes(4).toString('hex')}`;
    const first = await send(path, { key, body: { n: 1 } });
    expect(first.status).toBe(201);
    expect(first.json()).toMatchObject({ n: 1, key });
    const again = await send(path, { key, body: { n: 1 } });
    expect(again.replayed).toBe(true);
    expect(again.bytes.equals(first.bytes)).toBe(true);
    expect(await idem.get({ tenant: 'acme', operation, key })).not.toBeNull();
  }

  it('Express: after an app-wide express.json(), inside a router', async () => {
    const app = express();
    app.use(express.json());
    const router = express.Router();
    router.post(
      '/things/:id',
      expressIdempotency({ idem, tenant: (req) => req.get('x-tenant') }),
      (req, res) => {
        res.status(201).json({ ...(req.body as object), key: req.idem!.key });
      },
    );
    app.use('/api', router);
    const server = await new Promise<Server>((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s));
    });
    closers.push(() => {
      server.closeAllConnections();
      server.close();
    });
    await expectOperation(urlOf(server), '/api/things/7', 'POST /api/things/:id');
  });

  it("Hono: app.use('*') names the operation after the handling route", async () => {
    const app = new Hono<{ Variables: IdemVariables }>();
    app.use('*', honoIdempotency({ idem, tenant: (c) => c.req.header('x-tenant') }));
    app.post('/things/:id', async (c) =>
      c.json({ ...(await c.req.json<object>()), key: c.get('idem').key }, 201),
    );
    const server = await new Promise<Server>((resolve) => {
      const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s as Server));
    });
    closers.push(() => {
      server.closeAllConnections();
      server.close();
    });
    await expectOperation(urlOf(server), '/things/7', 'POST /things/:id');
  });

  it('Fastify: routes under a prefix, registered after the plugin', async () => {
    const app = Fastify({ logger: false });
    await app.register(fastifyIdempotency, {
      idem,
      tenant: (request) => request.headers['x-tenant'] as string | undefined,
    });
    await app.register(
      async (api) => {
        api.post('/things/:id', async (request, reply) =>
          reply.code(201).send({ ...(request.body as object), key: request.idem!.key }),
        );
      },
      { prefix: '/v1' },
    );
    await app.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => app.close());
    await expectOperation(urlOf(app.server), '/v1/things/7', 'POST /v1/things/:id');
  });
});
