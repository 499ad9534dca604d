/**
 * Fastify 5. `app.register(webhooks({ receiver, routes: { '/webhooks/github': 'github' } }))`
 * registers the routes in their own encapsulated context, where every content type is kept as raw
 * bytes (the JSON parser of the rest of the app never sees these bodies) and where a body over the
 * source's limit answers 413 as a problem document.
 *
 * For a route you declare yourself, `webhookHandler({ receiver, source })` is the handler; it
 * needs a Buffer body (a `parseAs: 'buffer'` content-type parser) and fails loudly with
 * `RawBodyUnavailableError` when Fastify's JSON parser already turned the body into an object.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyInstance, FastifyReply } from 'fastify';
import {
  isWebhookRequestError,
  RawBodyUnavailableError,
  WebhookBodyTooLargeError,
  WebhookMalformedError,
  type WebhookRequestError,
} from './errors.js';
import { nodeHeaders } from './headers.js';
import type { WebhookAnswer } from './problem.js';
import { parsedBodyMessage } from './raw-body.js';
import type { WebhookReceiver, WebhookRouteOptions } from './receiver.js';

/** Options of `webhooks` (idem/fastify). */
export interface FastifyWebhooksOptions {
  /** The receiver that verifies and stores deliveries (`createWebhookReceiver`). */
  receiver: WebhookReceiver;
  /** Path → source name, e.g. `{ '/webhooks/github': 'github' }`. */
  routes: Record<string, string>;
}

/**
 * Fastify's instance, request and reply, by the least of their shape (Fastify's own objects are
 * these). Declared here, not imported, so that idem/webhooks' types compile in an app without
 * Fastify.
 */
export type FastifyInstanceLike = object;
export interface FastifyRequestLike {
  headers: IncomingHttpHeaders;
  body: unknown;
}
export type FastifyReplyLike = object;

/** Fastify's own default `bodyLimit` (1 MiB), when the server sets none. */
const fastifyDefaultBodyLimit = 1_048_576;

/**
 * A Fastify plugin that mounts one POST route per entry of `routes`, with raw-body parsing. Each
 * route's body limit is the source's `maxBodyBytes`, never more than the server's own.
 */
export function webhooks(options: FastifyWebhooksOptions): (instance: FastifyInstanceLike) => Promise<void> {
  const { receiver } = options;
  const routes = Object.entries(options.routes).map(([path, source]) => ({
    path,
    source: receiver.source(source),
  }));
  return async (plugin) => {
    const instance = plugin as FastifyInstance; // what Fastify's register passes
    // Route URLs as Fastify reports them, with the registration prefix.
    const byPath = new Map(routes.map((r) => [instance.prefix + r.path, r.source.name]));
    const limits = new Map<string, number>();
    // Encapsulated: these parsers apply to the routes below only.
    instance.removeAllContentTypeParsers();
    instance.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
    instance.setErrorHandler((error: Error & { statusCode?: number; code?: string }, request, reply) => {
      const source = byPath.get(request.routeOptions.url ?? '') ?? routes[0]!.source.name;
      let mapped: WebhookRequestError | undefined;
      if (isWebhookRequestError(error)) mapped = error;
      else if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE')
        mapped = new WebhookBodyTooLargeError(
          limits.get(request.routeOptions.url ?? '') ?? receiver.source(source).maxBodyBytes,
        );
      else if (
        error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' ||
        error.code === 'FST_ERR_CTP_INVALID_CONTENT_LENGTH'
      ) {
        mapped = new WebhookMalformedError('the Content-Type or Content-Length header does not parse');
      }
      if (!mapped) return reply.send(error);
      return sendAnswer(reply, receiver.reject(source, mapped), mapped.status === 413);
    });
    // A route's bodyLimit overrides the server's, so it is never set above it: the smaller of the
    // source's limit and the server's (Fastify's default is 1 MiB) applies.
    const serverLimit = instance.initialConfig.bodyLimit ?? fastifyDefaultBodyLimit;
    for (const { path, source } of routes) {
      const bodyLimit = Math.min(source.maxBodyBytes, serverLimit);
      limits.set(instance.prefix + path, bodyLimit);
      instance.post(path, { bodyLimit }, webhookHandler({ receiver, source: source.name }));
    }
  };
}

/** Options of `webhookHandler` (idem/fastify). */
export type FastifyWebhookHandlerOptions = WebhookRouteOptions;

/** A Fastify route handler for one source. The route must deliver the body as a Buffer. */
export function webhookHandler(
  options: FastifyWebhookHandlerOptions,
): (request: FastifyRequestLike, reply: FastifyReplyLike) => Promise<FastifyReplyLike> {
  const { receiver, source } = options;
  receiver.source(source);
  return async (request, untypedReply) => {
    const reply = untypedReply as FastifyReply; // what Fastify passes
    const parsed: unknown = request.body;
    let body: Uint8Array;
    if (parsed === undefined || parsed === null) body = new Uint8Array(0);
    else if (parsed instanceof Uint8Array) body = parsed;
    else {
      const error = new RawBodyUnavailableError(
        parsedBodyMessage(
          'Fastify',
          "register the route with webhooks() from idem/fastify, or add a content-type parser with parseAs: 'buffer'",
        ),
      );
      return sendAnswer(reply, receiver.reject(source, error));
    }
    // The receiver checks the source's body limit again, for bodies parsed by another parser.
    return sendAnswer(reply, await receiver.receive(source, { headers: nodeHeaders(request.headers), body }));
  };
}

function sendAnswer(reply: FastifyReply, answer: WebhookAnswer, close = false): FastifyReply {
  reply.code(answer.status).headers(answer.headers);
  if (close) reply.header('connection', 'close');
  // A Buffer, so Fastify sends the content type as given (a string would get "; charset=utf-8").
  return reply.send(Buffer.from(answer.body, 'utf8'));
}
