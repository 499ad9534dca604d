/**
 * The Idempotency-Key contract for Express 5, as route middleware.
 *
 * @example
 * import { idempotency } from 'idem/express';
 * const idempotent = idempotency({ idem, tenant: (req) => req.user.accountId });
 * app.post('/orders', idempotent, async (req, res) => {
 *   const { rows } = await req.idem!.tx.query('INSERT INTO orders (amount) VALUES ($1) RETURNING id', [req.body.amount]);
 *   res.status(201).json({ id: rows[0].id });
 * });
 * app.post('/checkout', idempotent.with({ mode: 'steps' }), checkoutHandler);
 *
 * Mount it on the route (as above, or `router.post(...)`), not with `app.use`: only there does
 * Express know the route pattern the operation is named after. With `app.use`, give `operation`.
 * The middleware reads and parses the body itself (JSON → object, `text/*` → string, anything else
 * → Buffer) within `maxBodyBytes`, unless a body parser already ran. Mount body parsers before it
 * (`app.use(express.json())`): their own `limit` then governs what they read, and a declared
 * `Content-Length` over `maxBodyBytes` is still refused. A parser mounted after it finds the body
 * read already and does nothing, so its limit would not apply.
 */
import type { IncomingMessage } from 'node:http';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { IdempotencyContext } from './context.js';
import { HttpIdempotency } from './engine.js';
import type { IdempotencyOptions } from './options.js';
import { writeNodeResponse } from './node-response-capture.js';
import { executeCaptured, nodeRequestView } from './node-request.js';
import { declaredLength, readNodeBody, readRequestBody } from './request-body.js';

export { webhooks, type ExpressWebhookOptions } from '../webhooks/express.js';

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace -- Express's own extension point
  namespace Express {
    interface Request {
      /** Set by the idempotency middleware on covered requests that carry a key. */
      idem?: IdempotencyContext;
    }
  }
}

/** Options of the Express middleware; `tenant` and `operation` receive the Express request. */
export type ExpressIdempotencyOptions<Client = unknown> = IdempotencyOptions<Request, Client>;

/** The middleware, with `.with(overrides)` for routes that need other options. */
export interface ExpressIdempotency<Client = unknown> extends RequestHandler {
  with(overrides: Partial<IdempotencyOptions<Request, Client>>): ExpressIdempotency<Client>;
  readonly engine: HttpIdempotency<Request, Client>;
}

export function idempotency<Client = unknown>(
  options: ExpressIdempotencyOptions<Client>,
): ExpressIdempotency<Client> {
  return middleware(new HttpIdempotency<Request, Client>(options));
}

function middleware<Client>(engine: HttpIdempotency<Request, Client>): ExpressIdempotency<Client> {
  const handler = (req: Request, res: Response, next: NextFunction) => {
    handle(engine, req, res, next).catch((error: unknown) => {
      // Only reached if sending itself failed: the response may be half-written.
      engine.reportError('send', error);
      if (!res.headersSent) next(error);
      else res.destroy();
    });
  };
  return Object.assign(handler, {
    with: (overrides: Partial<IdempotencyOptions<Request, Client>>) => middleware(engine.with(overrides)),
    engine,
  });
}

async function handle<Client>(
  engine: HttpIdempotency<Request, Client>,
  req: Request,
  res: Response,
  next: NextFunction,
): Promise<void> {
  if (!engine.covers(req.method)) return next();
  const view = nodeRequestView(
    req,
    req,
    { method: req.method, url: req.originalUrl, route: routePattern(req) },
    engine.options.keyHeader,
  );
  let admission;
  try {
    admission = await engine.admit(view);
  } catch (error) {
    return next(error); // the tenant resolver's own error, e.g. 401 from auth
  }
  if (admission.kind === 'pass') return next();
  if (admission.kind === 'answer') return writeNodeResponse(res, admission.response);

  let body: unknown = req.body;
  if (body === undefined && hasUnreadBody(req)) {
    let read;
    try {
      const limit = engine.options.maxBodyBytes;
      read = await readRequestBody(engine, () => readNodeBody(req, limit), req.headers['content-type']);
    } catch (error) {
      return next(error);
    }
    if ('problem' in read) return writeNodeResponse(res, read.problem);
    body = req.body = read.body;
  }

  await executeCaptured(engine, admission.ticket, body, res, (context) => {
    req.idem = context;
    next(); // the route's handler runs; its response (or the error handler's) is captured
  });
}

/** `/orders/:id` with the router's mount path, or undefined outside a route. */
function routePattern(req: Request): string | undefined {
  const path = (req as { route?: { path?: unknown } }).route?.path;
  let pattern: string;
  if (typeof path === 'string') pattern = path;
  else if (path instanceof RegExp) pattern = String(path);
  else if (Array.isArray(path)) pattern = path.map(String).join('|');
  else return undefined;
  return `${req.baseUrl ?? ''}${pattern}`;
}

function hasUnreadBody(req: IncomingMessage): boolean {
  if (req.readableEnded) return false;
  return (
    req.headers['transfer-encoding'] !== undefined || (declaredLength(req.headers['content-length']) ?? 0) > 0
  );
}
