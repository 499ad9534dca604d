/**
 * The Idempotency-Key contract for a plain `node:http` handler.
 *
 * @example
 * import { createServer } from 'node:http';
 * import { withIdempotency } from 'idem/node-http';
 * const createOrder = withIdempotency({ idem, tenant: accountOf, route: '/orders' }, async (req, res) => {
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
import { HttpIdempotency, replacesHandlerResponse, type RequestView } from './engine.js';
import type { IdempotencyOptions } from './options.js';
import {
  captureNodeResponse,
  rawHeaderValues,
  writeNodeResponse,
  type NodeResponseCapture,
} from './node-response-capture.js';
import {
  BodyMalformedError,
  BodyTooLargeError,
  declaredLength,
  parseBody,
  readNodeBody,
} from './request-body.js';

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
  /** Called with errors idem answers 500/503 for, and with a handler's error. Default: `console.error`. */
  onError?: (error: unknown) => void;
};

/** Wraps one handler. Returns a `(req, res)` listener that resolves when the response is sent. */
export function withIdempotency<Client = unknown>(
  options: NodeHttpIdempotencyOptions<Client>,
  handler: IdempotentHandler<Client>,
): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  const engine = new HttpIdempotency<IncomingMessage, Client>(options);
  const onError = options.onError ?? ((error: unknown) => console.error('[idem/node-http]', error));
  const route = options.route;
  return async (incoming, res) => {
    const req = incoming as IdempotentRequest<Client>;
    if (!engine.covers(req.method ?? 'GET')) return runHandler(handler, req, res, onError, engine);
    const [path = '/', query = ''] = (req.url ?? '/').split('?', 2);
    const view: RequestView<IncomingMessage> = {
      native: req,
      method: req.method ?? 'GET',
      route: typeof route === 'function' ? route(req) : route,
      path,
      query,
      keyFields: rawHeaderValues(req.rawHeaders, engine.options.header),
      contentLength: declaredLength(req.headers['content-length']),
    };
    let admission;
    try {
      admission = await engine.admit(view);
    } catch (error) {
      onError(error);
      return writeNodeResponse(res, engine.problem('internal', 'the tenant could not be resolved'));
    }
    if (admission.kind === 'answer') return writeNodeResponse(res, admission.response);
    let body: unknown;
    try {
      body = parseBody(await readNodeBody(req, engine.options.maxBodyBytes), req.headers['content-type']);
    } catch (error) {
      if (error instanceof BodyTooLargeError) return writeNodeResponse(res, engine.bodyTooLarge());
      if (error instanceof BodyMalformedError)
        return writeNodeResponse(res, engine.bodyMalformed(error.message));
      throw error;
    }
    req.body = body;
    if (admission.kind === 'pass') return runHandler(handler, req, res, onError, engine);

    let capture: NodeResponseCapture | undefined;
    const answer = await engine.execute(admission.ticket, body, (context) => {
      req.idem = context;
      capture = captureNodeResponse(res);
      void runHandler(handler, req, res, onError, engine);
      return capture.done;
    });
    if (answer.kind === 'handler') capture!.release();
    else if (replacesHandlerResponse(answer) && capture) capture.replace(answer.response);
    else writeNodeResponse(res, answer.response);
  };
}

/** Runs the handler; a throw before it answered becomes a 500 (captured, so never stored). */
async function runHandler<Client>(
  handler: IdempotentHandler<Client>,
  req: IdempotentRequest<Client>,
  res: ServerResponse,
  onError: (error: unknown) => void,
  engine: HttpIdempotency<IncomingMessage, Client>,
): Promise<void> {
  try {
    await handler(req, res);
  } catch (error) {
    onError(error);
    if (!res.headersSent && !res.writableEnded) {
      writeNodeResponse(res, engine.problem('internal', 'the request handler failed'));
    }
  }
}
