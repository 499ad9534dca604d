/**
 * node:http: `http.createServer(webhooks({ receiver, source: 'github' }))`, or call it from your own
 * router. Reads the exact bytes itself.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isWebhookRequestError } from './errors.js';
import { nodeHeaders } from './headers.js';
import type { WebhookAnswer } from './problem.js';
import { readNodeBody } from './raw-body.js';
import type { WebhookRouteOptions } from './receiver.js';

/** Options of `webhooks` (idem/node-http). */
export type NodeWebhookOptions = WebhookRouteOptions;

/** A node:http request handler for one source. Answers every request itself. */
export function webhooks(
  options: NodeWebhookOptions,
): (request: IncomingMessage, response: ServerResponse) => Promise<void> {
  const { receiver, source } = options;
  const resolved = receiver.source(source);
  return async (request, response) => {
    let body: Uint8Array;
    try {
      body = await readNodeBody(request, resolved.maxBodyBytes);
    } catch (error) {
      if (!isWebhookRequestError(error)) throw error;
      sendNodeAnswer(response, receiver.reject(source, error), error.status === 413);
      return;
    }
    sendNodeAnswer(response, await receiver.receive(source, { headers: nodeHeaders(request.headers), body }));
  };
}

/** Writes an answer on a Node response. `close` asks the client to open a new connection. */
export function sendNodeAnswer(response: ServerResponse, answer: WebhookAnswer, close = false): void {
  const headers: Record<string, string | number> = {
    ...answer.headers,
    'content-length': Buffer.byteLength(answer.body),
  };
  if (close) headers.connection = 'close';
  response.writeHead(answer.status, headers);
  response.end(answer.body);
}
