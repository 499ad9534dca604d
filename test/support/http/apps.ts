/**
 * The same service six times: Express 5, Fastify 5, Hono 4 on @hono/node-server, plain node:http,
 * and NestJS on Express and on Fastify (test/support/nestjs/apps.ts), each using the idempotency
 * integration its own way and listening on 127.0.0.1.
 *
 * Routes (all covered ones behind the contract):
 *   POST  /orders        transaction mode; inserts an order; 201 with Location, Set-Cookie, X-Trace
 *   PATCH /orders/:id    transaction mode; route pattern in the operation name
 *   POST  /payments      402 on card "declined" (a business refusal, stored)
 *   POST  /flaky         throws a retryable error on its first run per key
 *   POST  /fragile       its business row makes COMMIT fail while commit_switch says so
 *   POST  /bytes/:kind   exact JSON / text / binary bytes
 *   POST  /inflight      like /orders with waitMs 300
 *   POST  /ephemeral     like /orders with a 60 s result and 120 s tombstone
 *   POST  /checkout      steps mode; two provider calls with derived keys
 *   POST  /optional      key optional
 *   GET   /health        not covered
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import express from 'express';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import { Hono, type Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { IdempotencyContext, IdempotencyOptions } from 'idem/http';
import { idempotency as expressIdempotency } from 'idem/express';
import { idempotency as fastifyIdempotency } from 'idem/fastify';
import { idempotency as honoIdempotency, type IdemVariables } from 'idem/hono';
import { type IdempotentRequest, idempotency as nodeIdempotency } from 'idem/node-http';
import { createEvents, type IdemEvents } from 'idem';
import { nestFrameworks } from '../nestjs/apps.js';
import { business, type Reply } from './business.js';
import type { Harness } from './harness.js';

export interface RunningApp {
  url: string;
  /** Errors the integration reported as `error` events (source `http`, or `nestjs`). */
  errors: unknown[];
  close(): Promise<void>;
}

export interface Framework {
  name: 'express' | 'fastify' | 'hono' | 'node-http' | 'nestjs-express' | 'nestjs-fastify';
  start(h: Harness): Promise<RunningApp>;
}

/** Per-route overrides, the same on every framework. */
const routeOptions = {
  inflight: { waitMs: 300 },
  ephemeral: { retention: { resultMs: 60_000, tombstoneMs: 120_000 } },
  checkout: { mode: 'steps' as const, waitMs: 300 },
  optional: { required: false },
};

/** A channel that keeps the errors reported on it. */
export function errorsInto(errors: unknown[]): IdemEvents {
  const events = createEvents();
  events.on('error', ({ error }) => errors.push(error));
  return events;
}

function common<Req>(h: Harness, errors: unknown[], tenant: (req: Req) => string | undefined) {
  return {
    idem: h.idem,
    tenant,
    maxBodyBytes: 16 * 1024,
    fingerprint: { exclude: ['clientTime'] },
    events: errorsInto(errors),
  } satisfies IdempotencyOptions<Req>;
}

function listening(server: Server, h: Harness, errors: unknown[], close?: () => Promise<void>): RunningApp {
  server.on('request', () => h.arrivals.count++);
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    errors,
    close:
      close ??
      (() =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        })),
  };
}

const bytesOf = (data: Uint8Array | string) => (typeof data === 'string' ? data : Buffer.from(data));

// ---------------------------------------------------------------------------------------- Express

const expressFramework: Framework = {
  name: 'express',
  async start(h) {
    const errors: unknown[] = [];
    const biz = business(h);
    const app = express();
    const idempotent = expressIdempotency(common<express.Request>(h, errors, (req) => req.get('x-tenant')));
    const render = (res: express.Response, reply: Reply) => {
      res.status(reply.status);
      for (const [name, value] of Object.entries(reply.headers ?? {})) res.set(name, value);
      if (reply.raw) res.set('content-type', reply.raw.contentType).send(bytesOf(reply.raw.data));
      else res.json(reply.json);
    };
    const gate = (req: express.Request) => req.get('x-test-gate');
    const idem = (req: express.Request) => req.idem!;
    app.post('/orders', idempotent, async (req, res) =>
      render(res, await biz.createOrder(idem(req), req.body as never, gate(req))),
    );
    app.patch('/orders/:id', idempotent, async (req, res) =>
      render(res, await biz.updateOrder(idem(req), String(req.params.id), req.body as never)),
    );
    app.post('/payments', idempotent, async (req, res) =>
      render(res, await biz.pay(idem(req), req.body as never)),
    );
    app.post('/flaky', idempotent, async (req, res) => render(res, await biz.flaky(idem(req))));
    app.post('/fragile', idempotent, async (req, res) => render(res, await biz.fragile(idem(req))));
    app.post('/bytes/:kind', idempotent, async (req, res) =>
      render(res, await biz.bytes(idem(req), String(req.params.kind))),
    );
    for (const name of ['inflight', 'ephemeral'] as const) {
      app.post(`/${name}`, idempotent.with(routeOptions[name]), async (req, res) =>
        render(res, await biz.createOrder(idem(req), req.body as never, gate(req))),
      );
    }
    app.post('/checkout', idempotent.with(routeOptions.checkout), async (req, res) =>
      render(res, await biz.checkout(idem(req), req.body as never, gate(req))),
    );
    app.post('/optional', idempotent.with(routeOptions.optional), (req, res) => {
      res.json({ idem: req.idem !== undefined });
    });
    app.get('/health', (_req, res) => {
      res.send('ok');
    });
    app.use((error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      res.status(500).json({ error: error.message });
    });
    const server = await new Promise<Server>((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s));
    });
    return listening(server, h, errors);
  },
};

// ---------------------------------------------------------------------------------------- Fastify

const fastifyFramework: Framework = {
  name: 'fastify',
  async start(h) {
    const errors: unknown[] = [];
    const biz = business(h);
    const app = Fastify({ logger: false });
    app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_req, body, done) =>
      done(null, body),
    );
    await app.register(
      fastifyIdempotency,
      common<FastifyRequest>(h, errors, (request) => request.headers['x-tenant'] as string | undefined),
    );
    const render = (reply: FastifyReply, out: Reply) => {
      reply.code(out.status);
      for (const [name, value] of Object.entries(out.headers ?? {})) void reply.header(name, value);
      if (out.raw) return reply.header('content-type', out.raw.contentType).send(bytesOf(out.raw.data));
      return reply.send(out.json);
    };
    type Req = FastifyRequest<{ Params: { id: string; kind: string }; Body: never }>;
    const gate = (request: Req) => request.headers['x-test-gate'] as string | undefined;
    const idem = (request: Req) => request.idem!;
    app.post('/orders', async (request: Req, reply) =>
      render(reply, await biz.createOrder(idem(request), request.body as never, gate(request))),
    );
    app.patch('/orders/:id', async (request: Req, reply) =>
      render(reply, await biz.updateOrder(idem(request), request.params.id, request.body as never)),
    );
    app.post('/payments', async (request: Req, reply) =>
      render(reply, await biz.pay(idem(request), request.body as never)),
    );
    app.post('/flaky', async (request: Req, reply) => render(reply, await biz.flaky(idem(request))));
    app.post('/fragile', async (request: Req, reply) => render(reply, await biz.fragile(idem(request))));
    app.post('/bytes/:kind', async (request: Req, reply) =>
      render(reply, await biz.bytes(idem(request), request.params.kind)),
    );
    for (const name of ['inflight', 'ephemeral'] as const) {
      app.post(`/${name}`, { config: { idempotency: routeOptions[name] } }, async (request: Req, reply) =>
        render(reply, await biz.createOrder(idem(request), request.body as never, gate(request))),
      );
    }
    app.post('/checkout', { config: { idempotency: routeOptions.checkout } }, async (request: Req, reply) =>
      render(reply, await biz.checkout(idem(request), request.body as never, gate(request))),
    );
    app.post('/optional', { config: { idempotency: routeOptions.optional } }, async (request) => ({
      idem: request.idem !== null,
    }));
    app.get('/health', async () => 'ok');
    app.setErrorHandler((error: Error, _request, reply) => reply.code(500).send({ error: error.message }));
    await app.listen({ port: 0, host: '127.0.0.1' });
    return listening(app.server, h, errors, () => app.close());
  },
};

// ------------------------------------------------------------------------------------------- Hono

const honoFramework: Framework = {
  name: 'hono',
  async start(h) {
    const errors: unknown[] = [];
    const biz = business(h);
    const app = new Hono<{ Variables: IdemVariables }>();
    const idempotent = honoIdempotency(common<Context>(h, errors, (c) => c.req.header('x-tenant')));
    const render = (c: Context, reply: Reply) => {
      for (const [name, value] of Object.entries(reply.headers ?? {})) {
        for (const v of [value].flat()) c.header(name, v, { append: true });
      }
      const status = reply.status as ContentfulStatusCode;
      if (reply.raw) {
        const data = reply.raw.data;
        return c.body(typeof data === 'string' ? data : (data as Uint8Array<ArrayBuffer>), status, {
          'content-type': reply.raw.contentType,
        });
      }
      return c.json(reply.json, status);
    };
    const body = async (c: Context) => (await c.req.json().catch(() => undefined)) as never;
    const gate = (c: Context) => c.req.header('x-test-gate');
    app.post('/orders', idempotent, async (c) =>
      render(c, await biz.createOrder(c.get('idem'), await body(c), gate(c))),
    );
    app.patch('/orders/:id', idempotent, async (c) =>
      render(c, await biz.updateOrder(c.get('idem'), c.req.param('id'), await body(c))),
    );
    app.post('/payments', idempotent, async (c) => render(c, await biz.pay(c.get('idem'), await body(c))));
    app.post('/flaky', idempotent, async (c) => render(c, await biz.flaky(c.get('idem'))));
    app.post('/fragile', idempotent, async (c) => render(c, await biz.fragile(c.get('idem'))));
    app.post('/bytes/:kind', idempotent, async (c) =>
      render(c, await biz.bytes(c.get('idem'), c.req.param('kind'))),
    );
    for (const name of ['inflight', 'ephemeral'] as const) {
      app.post(`/${name}`, idempotent.with(routeOptions[name]), async (c) =>
        render(c, await biz.createOrder(c.get('idem'), await body(c), gate(c))),
      );
    }
    app.post('/checkout', idempotent.with(routeOptions.checkout), async (c) =>
      render(c, await biz.checkout(c.get('idem'), await body(c), gate(c))),
    );
    app.post('/optional', idempotent.with(routeOptions.optional), (c) =>
      c.json({ idem: c.get('idem') !== undefined }),
    );
    app.get('/health', (c) => c.text('ok'));
    app.onError((error, c) => c.json({ error: error.message }, 500));
    const server = await new Promise<Server>((resolve) => {
      const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s as Server));
    });
    return listening(server, h, errors);
  },
};

// -------------------------------------------------------------------------------------- node:http

const nodeHttpFramework: Framework = {
  name: 'node-http',
  async start(h) {
    const errors: unknown[] = [];
    const biz = business(h);
    const base = common<IncomingMessage>(h, errors, (req) => req.headers['x-tenant'] as string | undefined);
    const render = (res: ServerResponse, reply: Reply) => {
      const headers = { ...reply.headers };
      if (reply.raw) {
        res
          .writeHead(reply.status, { ...headers, 'content-type': reply.raw.contentType })
          .end(bytesOf(reply.raw.data));
      } else {
        res
          .writeHead(reply.status, { ...headers, 'content-type': 'application/json' })
          .end(JSON.stringify(reply.json));
      }
    };
    type Handler = (req: IdempotentRequest, res: ServerResponse, params: string[]) => Promise<void>;
    const routes: {
      method: string;
      pattern: RegExp;
      listener: (req: IncomingMessage, res: ServerResponse) => Promise<void>;
    }[] = [];
    const add = (
      method: string,
      route: string,
      pattern: RegExp,
      handler: Handler,
      overrides: Partial<IdempotencyOptions<IncomingMessage>> = {},
    ) => {
      const listener = nodeIdempotency({
        ...base,
        ...overrides,
        route,
        handler: (req, res) => handler(req, res, pattern.exec((req.url ?? '').split('?')[0]!)!.slice(1)),
      });
      routes.push({ method, pattern, listener });
    };
    const gate = (req: IncomingMessage) => req.headers['x-test-gate'] as string | undefined;
    add('POST', '/orders', /^\/orders$/, async (req, res) =>
      render(res, await biz.createOrder(req.idem!, req.body as never, gate(req))),
    );
    add('PATCH', '/orders/:id', /^\/orders\/([^/]+)$/, async (req, res, [id]) =>
      render(res, await biz.updateOrder(req.idem!, id!, req.body as never)),
    );
    add('POST', '/payments', /^\/payments$/, async (req, res) =>
      render(res, await biz.pay(req.idem!, req.body as never)),
    );
    add('POST', '/flaky', /^\/flaky$/, async (req, res) => render(res, await biz.flaky(req.idem!)));
    add('POST', '/fragile', /^\/fragile$/, async (req, res) => render(res, await biz.fragile(req.idem!)));
    add('POST', '/bytes/:kind', /^\/bytes\/([^/]+)$/, async (req, res, [kind]) =>
      render(res, await biz.bytes(req.idem!, kind!)),
    );
    for (const name of ['inflight', 'ephemeral'] as const) {
      add(
        'POST',
        `/${name}`,
        new RegExp(`^/${name}$`),
        async (req, res) => render(res, await biz.createOrder(req.idem!, req.body as never, gate(req))),
        routeOptions[name],
      );
    }
    add(
      'POST',
      '/checkout',
      /^\/checkout$/,
      async (req, res) => render(res, await biz.checkout(req.idem!, req.body as never, gate(req))),
      routeOptions.checkout,
    );
    add(
      'POST',
      '/optional',
      /^\/optional$/,
      async (req, res) => render(res, { status: 200, json: { idem: req.idem !== undefined } }),
      routeOptions.optional,
    );
    const server = createServer((req, res) => {
      const path = (req.url ?? '/').split('?')[0]!;
      if (req.method === 'GET' && path === '/health') return void res.end('ok');
      const route = routes.find((r) => r.method === req.method && r.pattern.test(path));
      if (!route) return void res.writeHead(404).end();
      void route.listener(req, res);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return listening(server, h, errors);
  },
};

export const frameworks: Framework[] = [
  expressFramework,
  fastifyFramework,
  honoFramework,
  nodeHttpFramework,
  ...nestFrameworks,
];
export type { IdempotencyContext };
