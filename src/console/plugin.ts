/**
 * The operator console as a Fastify plugin: the page under `basePath` (default `/console`) and its
 * JSON API under `basePath/api/…`. Register it with `app.register(consolePlugin, options)`: it is
 * encapsulated, so its access checks apply to its own routes only.
 *
 * Every request passes, in order: the cross-site check (Fetch Metadata and Origin, on reads and the
 * live stream too), the access decision (bind address, Host, token), the check of every query
 * parameter against the route's own list (a 400 that names the parameter), and, for the few
 * writes, the mutation check. Database errors are logged, never echoed.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { systemClock } from '../core/clock.js';
import { InvalidArgumentError, isIdemError } from '../core/errors.js';
import { positiveInteger } from '../core/validate.js';
import {
  checkExposure,
  checkMutation,
  checkSite,
  decideAccess,
  sessionCookie,
  sessionValue,
} from './access.js';
import { loadAssets } from './assets.js';
import { ConsoleBusyError, consoleCells, type ConsoleDatabase } from './database.js';
import { createLiveFeed, createSharedSummary, type LiveFeed, type SharedSummary } from './live.js';
import { consoleDefaults, type ConsoleOptions } from './options.js';
import { InvalidParameterError, onlyKnown, optionalName, type Query } from './params.js';
import { listRequests, readRequest } from './views/requests.js';
import { readInbox } from './views/inbox.js';
import { readOutbox, redriveOutbox } from './views/outbox.js';
import { readSagas } from './views/sagas.js';
import { readSummary } from './views/summary.js';
import { readTasks } from './views/tasks.js';
import { readTrace, traceParameters } from './views/trace.js';
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
  const assets = loadAssets();
  const intervalMs = options.liveIntervalMs ?? consoleDefaults.liveIntervalMs;
  const maxPerClient = positiveInteger(
    'maxLivePerClient',
    options.maxLivePerClient ?? consoleDefaults.maxLivePerClient,
  );
  const maxTotal = positiveInteger('maxLiveTotal', options.maxLiveTotal ?? consoleDefaults.maxLiveTotal);
  // One database per cell (`cells`), or the one of `pool`/`sql` under the name ''. Each has its
  // own shared summary and live feed; every route reads the cell its `?cell=` names (default: the
  // first), and only that cell's database.
  const cells = new Map<string, { db: ConsoleDatabase; summary: SharedSummary; live: LiveFeed }>();
  for (const [name, db] of consoleCells(
    options,
    clock,
    options.statementTimeoutMs ?? consoleDefaults.statementTimeoutMs,
    options.maxConcurrentReads ?? consoleDefaults.maxConcurrentReads,
  )) {
    // One summary for every stream and every API call that asks while it is read, or within half
    // a round of it: however many pages open at once, the summary runs once.
    const summary = createSharedSummary(() => readSummary(db), intervalMs / 2);
    const live = createLiveFeed({
      summary,
      intervalMs,
      maxPerClient,
      maxTotal,
      onError: (error) => app.log.error(error),
    });
    cells.set(name, { db, summary, live });
  }
  const cellNames = [...cells.keys()];
  const first = cells.get(cellNames[0]!)!;
  const db = first.db;
  /** The parameters every API route takes beside its own: `cell` when there are cells. */
  const common = cellNames[0] === '' ? [] : ['cell'];
  const cellOf = (query: Query) => {
    const name = optionalName(query, 'cell');
    if (name === undefined) return first;
    const cell = common.length > 0 ? cells.get(name) : undefined;
    if (!cell)
      throw new InvalidParameterError('cell', `names no cell (known: ${cellNames.join(', ') || 'none'})`);
    return cell;
  };
  app.addHook('preClose', (done) => {
    for (const cell of cells.values()) cell.live.close();
    done();
  });

  // What the server really listens on; `host` until it listens (and for `inject`).
  const boundTo = (): string => {
    const address = app.server.address();
    return address !== null && typeof address === 'object' ? address.address : host;
  };

  const isPage = (request: FastifyRequest) => {
    const path = request.url.split('?', 1)[0];
    return path === basePath || path === `${basePath}/`;
  };

  app.addHook('onRequest', async (request, reply) => {
    for (const [name, value] of Object.entries(securityHeaders)) void reply.header(name, value);
    const crossSite = checkSite(
      {
        origin: header(request, 'origin'),
        host: request.headers.host,
        'sec-fetch-site': header(request, 'sec-fetch-site'),
        'sec-fetch-mode': header(request, 'sec-fetch-mode'),
        'sec-fetch-dest': header(request, 'sec-fetch-dest'),
      },
      { page: isPage(request), method: request.method },
    );
    if (crossSite) return problem(reply, 403, crossSite);
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
        origin: header(request, 'origin'),
        host: request.headers.host,
        'sec-fetch-site': header(request, 'sec-fetch-site'),
        'x-idem-console': header(request, 'x-idem-console'),
        'content-type': request.headers['content-type'],
      });
      if (refused) return problem(reply, 403, refused);
    }
  });

  app.setErrorHandler((error: unknown, _request, reply) => {
    if (error instanceof InvalidParameterError) {
      return problem(reply, 400, error.message, {
        'invalid-params': [{ name: error.parameter, reason: error.reason }],
      });
    }
    if (isIdemError(error) && error.code === 'IDEM_INVALID_ARGUMENT')
      return problem(reply, 400, error.message);
    const status = (error as { statusCode?: number }).statusCode;
    // Fastify's own refusals (a body that is not JSON, too large…): their messages are Fastify's.
    if (typeof status === 'number' && status >= 400 && status < 500) {
      return problem(reply, status, (error as Error).message);
    }
    if (error instanceof ConsoleBusyError) {
      void reply.header('retry-after', '1');
      return problem(reply, 503, error.message);
    }
    if ((error as { code?: string }).code === '57014') {
      return problem(
        reply,
        503,
        "the query ran past the console's statement timeout: narrow it with a tenant filter (read through the primary key)",
      );
    }
    // The database's own text (table names, constraint names, values) stays in the server's log.
    app.log.error(error);
    return problem(reply, 500, 'the console could not read the database (see the server log)');
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
  // The page's scripts (ES modules, which import each other by relative path: `views/outbox.js`)
  // and stylesheets. Only the files found at startup: `__proto__`, `../index.html` and the like
  // are no assets.
  app.get<{ Params: { '*': string } }>(`${basePath}/assets/*`, async (request, reply) => {
    const file = assets.files.get(request.params['*']);
    if (!file) return problem(reply, 404, 'no such asset');
    return reply.type(file.type).send(file.body);
  });

  const api = `${basePath}/api`;
  /** A GET route of the API that reads `parameters` (and `cell`) and nothing else, on its cell. */
  const read = (
    path: string,
    parameters: readonly string[],
    handler: (query: Query, db: ConsoleDatabase, reply: FastifyReply) => Promise<unknown>,
  ) =>
    app.get(`${api}/${path}`, async (request, reply) => {
      const query = request.query as Query;
      onlyKnown(query, [...parameters, ...common]);
      return handler(query, cellOf(query).db, reply);
    });
  // The cells this console reads; [] without cells (the page then shows no selector).
  read('cells', [], async () => ({ cells: common.length > 0 ? cellNames : [] }));
  // Concurrent calls share the read in flight; none is served from an older one.
  read('summary', [], async (query) => cellOf(query).summary.get(0));
  read(
    'requests',
    ['tenant', 'operation', 'state', 'olderThan', 'newerThan', 'limit', 'cursor'],
    (query, db) => listRequests(db, query),
  );
  read('requests/detail', ['tenant', 'operation', 'key'], async (query, db, reply) => {
    const detail = await readRequest(db, query);
    return detail ?? problem(reply, 404, 'no such request');
  });
  // An intent's timeline, by its names or by a message id, derived key or delivery id (views/trace.ts).
  read('trace', traceParameters, async (query, db, reply) => {
    const timeline = await readTrace(db, query);
    return timeline ?? problem(reply, 404, 'no record names this intent');
  });
  read('outbox', ['topic', 'limit'], (query, db) => readOutbox(db, query));
  app.post(`${api}/outbox/redrive`, async (request) => {
    const query = request.query as Query;
    onlyKnown(query, common);
    const cell = cellOf(query);
    const result = await redriveOutbox(cell.db, request.body);
    cell.summary.invalidate();
    return result;
  });
  read('inbox', ['consumer', 'limit'], (query, db) => readInbox(db, query));
  read('webhooks', ['source', 'limit'], (query, db) => readWebhooks(db, query));
  read('tasks', ['tenant', 'queue', 'limit'], (query, db) => readTasks(db, query));
  read('sagas', ['tenant', 'saga', 'limit'], (query, db) => readSagas(db, query));
  app.get(`${api}/live`, (request, reply) => {
    const query = request.query as Query;
    onlyKnown(query, common);
    const { live } = cellOf(query);
    const refused = live.admit(request.ip);
    if (refused) {
      void reply.header('retry-after', '10');
      return problem(reply, 429, refused);
    }
    void reply.hijack();
    reply.raw.writeHead(200, {
      ...securityHeaders,
      'content-type': 'text/event-stream; charset=utf-8',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    reply.raw.write(': idem console\n\n');
    live.add(reply.raw, request.ip);
  });
}

function problem(
  reply: FastifyReply,
  status: number,
  detail: string,
  extras: Record<string, unknown> = {},
): FastifyReply {
  const titles: Record<number, string> = {
    400: 'Invalid request',
    401: 'Console token required',
    403: 'Forbidden',
    404: 'Not found',
    429: 'Too many live streams',
    500: 'Console error',
    503: 'Busy',
  };
  return reply
    .code(status)
    .type('application/problem+json')
    .send({
      type: `urn:idem:console:${status}`,
      title: titles[status] ?? 'Error',
      status,
      detail,
      ...extras,
    });
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
