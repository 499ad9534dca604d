/**
 * Express 5: `app.post('/webhooks/github', webhooks({ receiver, source: 'github' }))`, mounted before
 * (or beside) `express.json()`. The handler reads the raw bytes itself. When a body parser already
 * ran, a Buffer from `express.raw()` is used as it is (those are the received bytes); anything else
 * (an object from `express.json()`, a string from `express.text()`) fails loudly with
 * `RawBodyUnavailableError`, answered 500 and reported as an `error` event, because the signed bytes are
 * gone.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isWebhookRequestError, RawBodyUnavailableError } from './errors.js';
import { nodeHeaders } from './headers.js';
import { sendNodeAnswer } from './node-http.js';
import { parsedBodyMessage, readNodeBody } from './raw-body.js';
import type { WebhookRouteOptions } from './receiver.js';

/**
 * An Express request, by the shape the handler reads (Express's `Request` is one). Declared here,
 * not imported, so that idem/webhooks' types compile in an app without Express's types.
 */
export type ExpressRequestLike = IncomingMessage & { body?: unknown };

/** Options of `webhooks` (idem/express). */
export interface ExpressWebhookOptions<
  Req extends ExpressRequestLike = ExpressRequestLike,
> extends WebhookRouteOptions {
  /**
   * Where an earlier middleware kept the raw bytes, e.g. `(req) => req.rawBody` when
   * `express.json({ verify })` saved them. Default: read the stream, or use a Buffer `req.body`.
   */
  rawBody?: (request: Req) => Uint8Array | undefined;
}

/** An Express handler that verifies, stores and answers deliveries of one source. */
export function webhooks<Req extends ExpressRequestLike = ExpressRequestLike>(
  options: ExpressWebhookOptions<Req>,
): (request: Req, response: ServerResponse, next: (error?: unknown) => void) => void {
  const { receiver, source } = options;
  const resolved = receiver.source(source);
  return (request, response, next) => {
    handle(request, response).catch(next);
  };

  async function handle(request: Req, response: ServerResponse): Promise<void> {
    let body: Uint8Array;
    try {
      body = await rawBytes(request, resolved.maxBodyBytes, options);
    } catch (error) {
      if (!isWebhookRequestError(error)) throw error;
      sendNodeAnswer(response, receiver.reject(source, error), error.status === 413);
      return;
    }
    sendNodeAnswer(response, await receiver.receive(source, { headers: nodeHeaders(request.headers), body }));
  }
}

async function rawBytes<Req extends ExpressRequestLike>(
  request: Req,
  limit: number,
  options: ExpressWebhookOptions<Req>,
): Promise<Uint8Array> {
  const kept = options.rawBody?.(request);
  if (kept !== undefined) return kept;
  const parsed: unknown = request.body;
  if (parsed !== undefined) {
    if (parsed instanceof Uint8Array) return parsed;
    throw new RawBodyUnavailableError(
      parsedBodyMessage(
        'Express',
        'mount the webhook route before express.json()/express.text(), or use express.raw()',
      ),
    );
  }
  return readNodeBody(request, limit);
}
