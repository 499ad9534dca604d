/**
 * The Idempotency-Key contract for Hono 4 (on Node through `@hono/node-server`, or any runtime).
 *
 * @example
 * import { idempotency } from 'idem/hono';
 * const idempotent = idempotency({ idem, tenant: (c) => c.get('accountId') });
 * app.post('/orders', idempotent, async (c) => {
 *   const { amount } = await c.req.json();
 *   const { rows } = await c.get('idem').tx.query('INSERT INTO orders (amount) VALUES ($1) RETURNING id', [amount]);
 *   return c.json({ id: rows[0].id }, 201);
 * });
 *
 * It also works as `app.use('*', idempotent)`: the operation is named after the route that
 * handles the request. The body is read within `maxBodyBytes` and left in Hono's body cache, so
 * `c.req.json()`, `c.req.text()` and `c.req.arrayBuffer()` work as usual in the handler. Register
 * `hono/body-limit` before this middleware: the body is read through it, so its limit and its
 * answer apply first; the smaller of the two limits wins.
 */
import type { IncomingMessage } from 'node:http';
import type { Context, MiddlewareHandler } from 'hono';
import { matchedRoutes } from 'hono/route';
import type { IdempotencyContext } from './context.js';
import { HttpIdempotency, replacesHandlerResponse, type RequestView } from './engine.js';
import type { CapturedResponse, IdempotencyOptions } from './options.js';
import { BodyTooLargeError, declaredLength, readRequestBody, readWebBody } from './request-body.js';

export { webhooks, type HonoWebhookOptions } from '../webhooks/hono.js';

/** The context variables the middleware sets: `c.get('idem')`. */
export interface IdemVariables<Client = unknown> {
  idem: IdempotencyContext<Client>;
}

export type HonoIdempotencyOptions<Client = unknown> = IdempotencyOptions<Context, Client>;

export type HonoIdempotency<Client = unknown> = MiddlewareHandler<{ Variables: IdemVariables<Client> }> & {
  with(overrides: Partial<IdempotencyOptions<Context, Client>>): HonoIdempotency<Client>;
  readonly engine: HttpIdempotency<Context, Client>;
};

export function idempotency<Client = unknown>(
  options: HonoIdempotencyOptions<Client>,
): HonoIdempotency<Client> {
  return middleware(new HttpIdempotency<Context, Client>(options));
}

function middleware<Client>(engine: HttpIdempotency<Context, Client>): HonoIdempotency<Client> {
  const handler: MiddlewareHandler<{ Variables: IdemVariables<Client> }> = async (c, next) => {
    if (!engine.covers(c.req.method)) return next();
    const url = new URL(c.req.url);
    const view: RequestView<Context> = {
      native: c,
      method: c.req.method,
      route: routePattern(c),
      path: url.pathname,
      query: url.search.slice(1),
      keyFields: keyFields(c, engine.options.keyHeader),
      contentLength: declaredLength(c.req.header('content-length')),
      traceparent: c.req.header('traceparent'),
    };
    const admission = await engine.admit(view);
    if (admission.kind === 'answer') return toResponse(admission.response);

    const limit = engine.options.maxBodyBytes;
    const read = await readRequestBody(engine, () => readBody(c, limit), c.req.header('content-type'));
    if ('problem' in read) return toResponse(read.problem);
    if (admission.kind === 'pass') return next();

    const answer = await engine.execute(admission.ticket, read.body, async (context) => {
      c.set('idem', context);
      await next(); // a handler's throw is already turned into c.res by app.onError
      return captureResponse(c.res);
    });
    if (answer.kind === 'handler' || replacesHandlerResponse(answer)) {
      // Hono merges the old response's headers into a new one; clear first so a discarded
      // handler response leaves nothing (no Set-Cookie on a 503).
      c.res = undefined;
      c.res = toResponse(answer.response);
      return;
    }
    return toResponse(answer.response);
  };
  return Object.assign(handler, {
    with: (overrides: Partial<IdempotencyOptions<Context, Client>>) => middleware(engine.with(overrides)),
    engine,
  });
}

/** The pattern of the route that handles this request (the last one matched for its method). */
function routePattern(c: Context): string | undefined {
  const routes = matchedRoutes(c);
  const method = c.req.method.toUpperCase();
  for (let i = routes.length - 1; i >= 0; i--) {
    const route = routes[i]!;
    if (route.method === method) return route.path;
  }
  return routes.at(-1)?.path;
}

function keyFields(c: Context, header: string): string[] {
  // On Node the raw field lines are available and tell two fields apart; elsewhere the fetch
  // Headers join them with ", ", which the key parser refuses as a list.
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  if (incoming?.rawHeaders) {
    const values: string[] = [];
    const raw = incoming.rawHeaders;
    for (let i = 0; i + 1 < raw.length; i += 2)
      if (raw[i]!.toLowerCase() === header) values.push(raw[i + 1]!);
    return values;
  }
  const value = c.req.raw.headers.get(header);
  return value === null ? [] : [value];
}

async function readBody(c: Context, limit: number): Promise<Uint8Array> {
  const cache = c.req.bodyCache;
  if (Object.keys(cache).length > 0) {
    // An earlier middleware read the body already; Hono converts from its cache.
    const bytes = new Uint8Array(await c.req.arrayBuffer());
    if (bytes.byteLength > limit) throw new BodyTooLargeError(limit);
    return bytes;
  }
  const bytes = await readWebBody(c.req.raw.body, limit);
  // Leave the bytes where c.req.json()/text()/arrayBuffer() look first.
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  // (Hono types the cache as Body values; at run time it holds promises of them.)
  (cache as Record<string, unknown>).arrayBuffer = Promise.resolve(buffer);
  return bytes;
}

async function captureResponse(res: Response): Promise<CapturedResponse> {
  const headers: [string, string][] = [];
  res.headers.forEach((value, name) => {
    if (name !== 'set-cookie') headers.push([name, value]);
  });
  for (const cookie of res.headers.getSetCookie()) headers.push(['set-cookie', cookie]);
  return { status: res.status, headers, body: new Uint8Array(await res.arrayBuffer()) };
}

function toResponse(response: CapturedResponse): Response {
  const headers = new Headers();
  for (const [name, value] of response.headers) headers.append(name, value);
  const noBody =
    response.status === 204 || response.status === 304 || (response.status >= 100 && response.status < 200);
  return new Response(noBody ? null : (response.body as Uint8Array<ArrayBuffer>), {
    status: response.status,
    headers,
  });
}
