/**
 * The Idempotency-Key contract for a plain `node:http` handler.
 *
 * @example
 * import { createServer } from 'node:http';
 * import { idempotency } from 'idem/node-http';
 * const createOrder = idempotency({ idem, tenant: accountOf, route: '/orders', handler: async (req, res) => {
 *   const { rows } = await req.idem.tx.query('INSERT INTO orders (amount) VALUES ($1) RETURNING id', [req.body.amount]);
 *   res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: rows[0].id }));
 * });
 * createServer((req, res) => (req.url === '/orders' ? createOrder(req, res) : notFound(res)));
 *
 * node:http has no router, so the route pattern the operation is named after is an option. For
 * covered methods the wrapper reads the body within `maxBodyBytes` and hands it over parsed as
 * `req.body` (JSON → value, `text/*` → string, anything else → Buffer).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { IdempotencyContext } from './context.js';
import { HttpIdempotency } from './engine.js';
import type { IdempotencyOptions } from './options.js';
import { writeNodeResponse } from './node-response-capture.js';
import { executeCaptured, nodeRequestView } from './node-request.js';
import { readNodeBody, readRequestBody } from './request-body.js';

export { webhooks, type NodeWebhookOptions } from '../webhooks/node-http.js';

/** The request a wrapped handler receives. */
export type IdempotentRequest<Client = unknown> = IncomingMessage & {
  /** Set on covered requests that carry a key; undefined when the key is optional and absent. */
  idem?: IdempotencyContext<Client>;
  /** The parsed body, on covered methods. */
  body?: unknown;
};

export type IdempotentHandler<Client = unknown> = (
  req: IdempotentRequest<Client>,
  res: ServerResponse,
) => void | Promise<void>;

export type NodeHttpIdempotencyOptions<Client = unknown> = IdempotencyOptions<IncomingMessage, Client> & {
  /**
   * The route pattern this handler serves, e.g. `/orders/:id`, or a function of the request.
   * Required unless `operation` is given: the raw URL is not an operation name.
   */
  route?: string | ((req: IncomingMessage) => string);
  /** The handler the contract wraps: it gets `req.idem` and the parsed `req.body`. */
  handler: IdempotentHandler<Client>;
};

/**
 * Wraps one handler (`options.handler`). Returns a `(req, res)` listener that resolves when the
 * response is sent.
 *
 * @example
 * http.createServer(idempotency({ idem, tenant: () => 'acme', route: '/orders', handler: createOrder }));
 */
export function idempotency<Client = unknown>(
  options: NodeHttpIdempotencyOptions<Client>,
): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  const { handler } = options;
  const engine = new HttpIdempotency<IncomingMessage, Client>(options);
  const route = options.route;
  return async (incoming, res) => {
    const req = incoming as IdempotentRequest<Client>;
    if (!engine.covers(req.method ?? 'GET')) return runHandler(handler, req, res, engine);
    const view = nodeRequestView(
      req,
      req,
      {
        method: req.method ?? 'GET',
        url: req.url ?? '/',
        route: typeof route === 'function' ? route(req) : route,
      },
      engine.options.keyHeader,
    );
    let admission;
    try {
      admission = await engine.admit(view);
    } catch (error) {
      engine.reportError('tenant', error);
      return writeNodeResponse(res, engine.problem('internal', 'the tenant could not be resolved'));
    }
    if (admission.kind === 'answer') return writeNodeResponse(res, admission.response);
    const limit = engine.options.maxBodyBytes;
    const read = await readRequestBody(engine, () => readNodeBody(req, limit), req.headers['content-type']);
    if ('problem' in read) return writeNodeResponse(res, read.problem);
    req.body = read.body;
    if (admission.kind === 'pass') return runHandler(handler, req, res, engine);

    await executeCaptured(engine, admission.ticket, read.body, res, (context) => {
      req.idem = context;
      void runHandler(handler, req, res, engine);
    });
  };
}

/**
 * Runs the handler; a throw before it answered becomes a 500 (captured, so never stored), and an
 * `error` event (where `handler`): node:http has no error handler of its own to tell.
 */
async function runHandler<Client>(
  handler: IdempotentHandler<Client>,
  req: IdempotentRequest<Client>,
  res: ServerResponse,
  engine: HttpIdempotency<IncomingMessage, Client>,
): Promise<void> {
  try {
    await handler(req, res);
  } catch (error) {
    engine.reportError('handler', error);
    if (!res.headersSent && !res.writableEnded) {
      writeNodeResponse(res, engine.problem('internal', 'the request handler failed'));
    }
  }
}
