/**
 * What the integrations on Node's own request and response share (Express, node:http, NestJS): a
 * request as the engine sees it, and a handler run with its response held back
 * (node-response-capture.ts) until the engine says what to send.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { IdempotencyContext } from './context.js';
import { replacesHandlerResponse, type HttpIdempotency, type RequestView, type Ticket } from './engine.js';
import { captureNodeResponse, rawHeaderValues, writeNodeResponse } from './node-response-capture.js';
import { declaredLength } from './request-body.js';

/**
 * The engine's view of a request whose raw Node request is `raw`: `native` is what the option
 * callbacks receive (the framework's request; `raw` itself on Express and node:http), `url` the
 * path and query as received.
 */
export function nodeRequestView<Req>(
  native: Req,
  raw: IncomingMessage,
  request: { method: string; url: string; route: string | undefined },
  keyHeader: string,
): RequestView<Req> {
  const [path = '/', query = ''] = request.url.split('?', 2);
  return {
    native,
    method: request.method,
    route: request.route,
    path,
    query,
    keyFields: rawHeaderValues(raw.rawHeaders, keyHeader),
    contentLength: declaredLength(raw.headers['content-length']),
    traceparent: rawHeaderValues(raw.rawHeaders, 'traceparent')[0],
  };
}

/**
 * Runs the handler (`start` calls it) through the engine with `res` captured, then sends what the
 * engine answers: the handler's own response, or a problem in its place (the handler's headers
 * dropped), or a replay or problem when the handler never ran.
 */
export async function executeCaptured<Req, Client>(
  engine: HttpIdempotency<Req, Client>,
  ticket: Ticket,
  body: unknown,
  res: ServerResponse,
  start: (context: IdempotencyContext<Client>) => void,
): Promise<void> {
  let capture: ReturnType<typeof captureNodeResponse> | undefined;
  const answer = await engine.execute(ticket, body, (context) => {
    capture = captureNodeResponse(res);
    start(context);
    return capture.done;
  });
  if (answer.kind === 'handler') capture!.release();
  else if (replacesHandlerResponse(answer) && capture) capture.replace(answer.response);
  else writeNodeResponse(res, answer.response);
}
