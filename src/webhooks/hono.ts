/**
 * Hono 4: `app.post('/webhooks/github', webhooks({ receiver, source: 'github' }))`. Reads the request's
 * bytes itself, with the source's limit. When a middleware already read the body as JSON, text or
 * form data, Hono would hand back a re-serialised copy (`JSON.stringify` of the parsed value), so
 * the handler fails loudly with `RawBodyUnavailableError` instead; a body read as an ArrayBuffer or
 * Blob is the exact bytes and is used.
 */
import type { Context } from 'hono';
import { isWebhookRequestError, RawBodyUnavailableError } from './errors.js';
import { fetchHeaders } from './headers.js';
import type { WebhookAnswer } from './problem.js';
import { checkDeclaredLength, parsedBodyMessage, readWebBody } from './raw-body.js';
import type { WebhookRouteOptions } from './receiver.js';

/**
 * A Hono context, by the least of its shape (Hono's `Context` is one). Declared here, not imported,
 * so that idem/webhooks' types compile in an app without Hono.
 */
export interface HonoContextLike {
  req: { raw: Request };
}

/** Options of `webhooks` (idem/hono). */
export type HonoWebhookOptions = WebhookRouteOptions;

/** A Hono handler that verifies, stores and answers deliveries of one source. */
export function webhooks(options: HonoWebhookOptions): (c: HonoContextLike) => Promise<Response> {
  const { receiver, source } = options;
  const resolved = receiver.source(source);
  return async (context) => {
    const c = context as Context; // what Hono passes
    let body: Uint8Array;
    try {
      body = await rawBytes(c, resolved.maxBodyBytes);
    } catch (error) {
      if (!isWebhookRequestError(error)) throw error;
      return toResponse(receiver.reject(source, error), error.status === 413);
    }
    return toResponse(await receiver.receive(source, { headers: fetchHeaders(c.req.raw.headers), body }));
  };
}

async function rawBytes(c: Context, limit: number): Promise<Uint8Array> {
  const cache = c.req.bodyCache as Record<string, Promise<unknown> | undefined>;
  if (cache.arrayBuffer) return new Uint8Array((await cache.arrayBuffer) as ArrayBuffer);
  if (cache.blob) return new Uint8Array(await ((await cache.blob) as Blob).arrayBuffer());
  if (Object.keys(cache).length > 0 || c.req.raw.bodyUsed) {
    throw new RawBodyUnavailableError(
      parsedBodyMessage(
        'Hono',
        'mount the webhook route before middleware that reads c.req.json(), text() or parseBody()',
      ),
    );
  }
  checkDeclaredLength(c.req.header('content-length'), limit);
  return readWebBody(c.req.raw.body, limit);
}

function toResponse(answer: WebhookAnswer, close = false): Response {
  const headers = new Headers(answer.headers);
  if (close) headers.set('connection', 'close');
  return new Response(answer.body, { status: answer.status, headers });
}
