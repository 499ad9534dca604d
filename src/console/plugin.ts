/**
 * The operator console as a Fastify plugin: the page under `basePath` (default `/console`) and its
 * JSON API under `basePath/api/…`. Register it with `app.register(consolePlugin, options)`: it is
 * encapsulated, so its access checks apply to its own routes only.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { systemClock } from '../core/clock.js';
import { InvalidArgumentError, isIdemError } from '../core/errors.js';
import { checkExposure, checkMutation, decideAccess, sessionCookie, sessionValue } from './access.js';
import { loadAssets } from './assets.js';
import { consoleCells, type ConsoleDatabase } from './database.js';
import { createLiveFeed, type LiveFeed } from './live.js';
import { consoleDefaults, type ConsoleOptions } from './options.js';
import { optionalName, type Query } from './params.js';
import { listRequests, readRequest } from './views/requests.js';
import { readInbox } from './views/inbox.js';
import { readOutbox, redriveOutbox } from './views/outbox.js';
import { readSagas } from './views/sagas.js';
import { readSummary } from './views/summary.js';
import { readTasks } from './views/tasks.js';
import { readWebhooks } from './views/webhooks.js';

/** Headers on every console answer: no framing, no sniffing, no referrer (a `?token=` never leaks). */
const securityHeaders: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-resource-policy': 'same-origin',
  'cross-origin-opener-policy': 'same-origin',
  'cache-control': 'no-store',
};

const cookieMaxAgeSeconds = 12 * 3600;

export async function consolePlugin(app: FastifyInstance, options: ConsoleOptions): Promise<void> {
  const host = options.host ?? consoleDefaults.host;
  const token = options.token === '' ? undefined : options.token;
  checkExposure(host, token);
  const basePath = (options.basePath ?? consoleDefaults.basePath).replace(/\/+$/, '');
  if (!/^(\/[A-Za-z0-9._~-]+)+$/.test(basePath)) {
    throw new InvalidArgumentError('basePath must be a path such as /console');
  }
  const clock = options.clock ?? systemClock;
  // One database per cell (`cells`), or the one of `pool`/`sql` under the name ''. Every route
  // reads the cell its `?cell=` names (default: the first), and only that cell's database.
  const cells = consoleCells(
    options,
    clock,
    options.statementTimeoutMs ?? consoleDefaults.statementTimeoutMs,
  );
  const cellNames = [...cells.keys()];
  const db = cells.get(cellNames[0]!)!;
  const cellOf = (request: FastifyRequest): ConsoleDatabase => {
    const name = optionalName(request.query as Query, 'cell') ?? cellNames[0]!;
    const cell = cells.get(name);
    if (!cell) throw new InvalidArgumentError(`no cell ${JSON.stringify(name)}`);
    return cell;
  };
  const assets = loadAssets();
  const lives = new Map<ConsoleDatabase, LiveFeed>();
  const liveOf = (cell: ConsoleDatabase): LiveFeed => {
    let live = lives.get(cell);
    if (!live) {
      live = createLiveFeed(
        () => readSummary(cell),
        options.liveIntervalMs ?? consoleDefaults.liveIntervalMs,
      );
      lives.set(cell, live);
    }
    return live;
  };
  app.addHook('preClose', (done) => {
    for (const live of lives.values()) live.close();
    done();
  });

  // What the server really listens on; `host` until it listens (and for `inject`).
  const boundTo = (): string => {
    const address = app.server.address();
    return address !== null && typeof address === 'object' ? address.address : host;
  };

  app.addHook('onRequest', async (request, reply) => {
    for (const [name, value] of Object.entries(securityHeaders)) void reply.header(name, value);
    const query = request.query as Query;
    const queryToken = typeof query.token === 'string' ? query.token : undefined;
    const decision = decideAccess({
      boundTo: boundTo(),
      token,
      hostHeader: request.headers.host,
      authorization: request.headers.authorization,
      cookie: request.headers.cookie,
      queryToken,
    });
    if (!decision.allow) {
      if (decision.status === 401) void reply.header('www-authenticate', 'Bearer realm="idem console"');
      return problem(reply, decision.status, decision.reason);
    }
    if (decision.setCookie && token !== undefined) {
      const secure = request.protocol === 'https' ? '; Secure' : '';
      void reply.header(
        'set-cookie',
        `${sessionCookie}=${sessionValue(token)}; Path=${basePath}; HttpOnly; SameSite=Strict; Max-Age=${cookieMaxAgeSeconds}${secure}`,
      );
      // Take the token out of the address bar and history at once.
      if (request.method === 'GET' && !request.url.startsWith(`${basePath}/api/`)) {
        return reply.redirect(withoutToken(request.url), 303);
      }
    }
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      const refused = checkMutation({
        origin: request.headers.origin,
        host: request.headers.host,
        'sec-fetch-site': header(request, 'sec-fetch-site'),
        'x-idem-console': header(request, 'x-idem-console'),
        'content-type': request.headers['content-type'],
      });
      if (refused) return problem(reply, 403, refused);
    }
  });

  app.setErrorHandler((error: unknown, _request, reply) => {
    if (isIdemError(error) && error.code === 'IDEM_INVALID_ARGUMENT')
      return problem(reply, 400, error.message);
    const status = (error as { statusCode?: number }).statusCode;
    if (typeof status === 'number' && status >= 400 && status < 500) {
      return problem(reply, status, (error as Error).message);
    }
    if ((error as { code?: string }).code === '57014') {
      return problem(
        reply,
        503,
        "the query ran past the console's statement timeout: narrow it with a tenant filter (read through the primary key)",
      );
    }
    app.log.error(error);
    return problem(reply, 500, `the console could not read the database: ${(error as Error).message}`);
  });

  const page = (_request: FastifyRequest, reply: FastifyReply) =>
    reply.type('text/html; charset=utf-8').send(assets.page(basePath, db.schema));
  app.get(basePath, page);
  try {
    app.get(`${basePath}/`, page);
  } catch (error) {
    // An app with `ignoreTrailingSlash` already routes `/console/` to the route above.
    if ((error as { code?: string }).code !== 'FST_ERR_DUPLICATED_ROUTE') throw error;
  }
  app.get<{ Params: { name: string } }>(`${basePath}/assets/:name`, async (request, reply) => {
    const file = assets.files[request.params.name];
    if (!file) return problem(reply, 404, 'no such asset');
    return reply.type(file.type).send(file.body);
  });

  const api = `${basePath}/api`;
  // The cells this console reads; [] without cells (the page then shows no selector).
  app.get(`${api}/cells`, async () => ({ cells: cellNames.filter((name) => name !== '') }));
  app.get(`${api}/summary`, async (request) => readSummary(cellOf(request)));
  app.get(`${api}/requests`, async (request) => listRequests(cellOf(request), request.query as Query));
  app.get(`${api}/requests/detail`, async (request, reply) => {
    const detail = await readRequest(cellOf(request), request.query as Query);
    return detail ?? problem(reply, 404, 'no such request');
  });
  app.get(`${api}/outbox`, async (request) => readOutbox(cellOf(request), request.query as Query));
  app.post(`${api}/outbox/redrive`, async (request) => redriveOutbox(cellOf(request), request.body));
  app.get(`${api}/inbox`, async (request) => readInbox(cellOf(request), request.query as Query));
  app.get(`${api}/webhooks`, async (request) => readWebhooks(cellOf(request), request.query as Query));
  app.get(`${api}/tasks`, async (request) => readTasks(cellOf(request), request.query as Query));
  app.get(`${api}/sagas`, async (request) => readSagas(cellOf(request), request.query as Query));
  app.get(`${api}/live`, (request, reply) => {
    const live = liveOf(cellOf(request));
    void reply.hijack();
    reply.raw.writeHead(200, {
      ...securityHeaders,
      'content-type': 'text/event-stream; charset=utf-8',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    reply.raw.write(': idem console\n\n');
    live.add(reply.raw);
  });
}

function problem(reply: FastifyReply, status: number, detail: string): FastifyReply {
  const titles: Record<number, string> = {
    400: 'Invalid request',
    401: 'Console token required',
    403: 'Forbidden',
    404: 'Not found',
    500: 'Console error',
    503: 'Too slow',
  };
  return reply
    .code(status)
    .type('application/problem+json')
    .send({ type: `urn:idem:console:${status}`, title: titles[status] ?? 'Error', status, detail });
}

function header(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function withoutToken(url: string): string {
  const parsed = new URL(url, 'http://console.invalid');
  parsed.searchParams.delete('token');
  return `${parsed.pathname}${parsed.search}`;
}
