/**
 * The Idempotency-Key contract for Fastify 5, as a plugin.
 *
 * @example
 * import { idempotency } from 'idem/fastify';
 * await app.register(idempotency, { idem, tenant: (request) => request.user.accountId });
 * app.post('/orders', async (request, reply) => {
 *   const { rows } = await request.idem!.tx.query('INSERT INTO orders (amount) VALUES ($1) RETURNING id', [request.body.amount]);
 *   return reply.code(201).send({ id: rows[0].id });
 * });
 * app.post('/checkout', { config: { idempotency: { mode: 'steps' } } }, checkoutHandler);
 * app.post('/webhooks/ping', { config: { idempotency: false } }, pingHandler);
 *
 * Every route registered after the plugin, in its scope and below, whose method is covered (POST
 * and PATCH by default) follows the contract, unless its `config.idempotency` is `false`; a route's
 * `config.idempotency` object overrides options for that route. The plugin adds route hooks:
 * `onRequest` checks the key and the declared length, `preParsing` counts a body sent without a
 * length against `maxBodyBytes`, `preValidation` fingerprints the body as received (before the
 * route's schema coerces it, fills defaults or removes properties), `preHandler` (after the route's
 * own, so after authentication) resolves the tenant and claims the key, `onSend` (last) captures
 * the serialized reply, stores it, commits, and only then lets Fastify send it.
 *
 * Limits only ever tighten: the body limit in force is the smaller of Fastify's (the route's
 * `bodyLimit`, else its content-type parser's, else the server's) and `maxBodyBytes`; the plugin
 * never sets the route's `bodyLimit`, which would override a smaller one of the server or a parser.
 * A route error handler answers Fastify's own refusals of a keyed request's body (415 no parser for
 * the media type, 413 too large, 400 invalid JSON or a length that does not match) as problem
 * documents; every other error goes on to the route's or the scope's handler.
 */
import type {
  FastifyError,
  FastifyInstance,
  FastifyPluginCallback,
  FastifyReply,
  FastifyRequest,
  RouteOptions,
} from 'fastify';
import { Transform } from 'node:stream';
import { InvalidArgumentError } from '../core/errors.js';
import { isPromiseLike } from '../core/promised.js';
import type { IdempotencyContext } from './context.js';
import { HttpIdempotency, type Answer, type RequestView } from './engine.js';
import type { CapturedResponse, IdempotencyOptions } from './options.js';
import { declaredLength } from './request-body.js';
import { headerMap, headerPairs } from './response-headers.js';
import { rawHeaderValues } from './node-response-capture.js';

export {
  webhooks,
  webhookHandler,
  type FastifyWebhooksOptions,
  type FastifyWebhookHandlerOptions,
} from '../webhooks/fastify.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the idempotency plugin on covered requests that carry a key; null otherwise. */
    idem: IdempotencyContext | null;
  }
  interface FastifyContextConfig {
    /** `false` leaves the route out of the contract; an object overrides the plugin's options. */
    idempotency?: false | Partial<IdempotencyOptions<FastifyRequest>>;
  }
}

export type FastifyIdempotencyOptions<Client = unknown> = IdempotencyOptions<FastifyRequest, Client>;

const stateKey = Symbol('idem.http.fastify');

interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
}

/** Per-request state between the hooks. */
interface RequestState {
  key?: string;
  /** Method, route, path and query (`requestParts`), read once for preValidation and preHandler. */
  parts?: RequestParts;
  /** Taken in preValidation, over the body as received; or the reason it could not be. */
  fingerprint?: { ok: true; value: string } | { ok: false; detail: string };
  /** Set when the handler runs under a claimed key; onSend hands it the reply. */
  captured?: Deferred<CapturedResponse>;
  answer?: Promise<Answer>;
}

type WithState = FastifyRequest & { [stateKey]?: RequestState };

const plugin: FastifyPluginCallback<FastifyIdempotencyOptions> = (fastify, options, done) => {
  const engine = new HttpIdempotency<FastifyRequest>(options);
  fastify.decorateRequest('idem', null);
  fastify.addHook('onRoute', (route) => attach(route, engine));
  done();
};

/**
 * The plugin. Registered without encapsulation (what `fastify-plugin` does), so it sees the routes
 * of the scope it is registered in.
 */
export const idempotency = Object.assign(plugin, {
  [Symbol.for('skip-override')]: true,
  [Symbol.for('fastify.display-name')]: 'idem-idempotency',
});

function attach(route: RouteOptions, base: HttpIdempotency<FastifyRequest>): void {
  const config = (route.config as { idempotency?: false | Partial<IdempotencyOptions<FastifyRequest>> })
    ?.idempotency;
  if (config === false) return;
  const engine = config ? base.with(config) : base;
  const methods = [route.method].flat();
  if (!methods.some((m) => engine.covers(m))) return;
  route.onRequest = [...hooks(route.onRequest), onRequest(engine)] as RouteOptions['onRequest'];
  route.preParsing = [...hooks(route.preParsing), preParsing(engine)] as RouteOptions['preParsing'];
  route.preValidation = [
    ...hooks(route.preValidation),
    preValidation(engine),
  ] as RouteOptions['preValidation'];
  route.preHandler = [...hooks(route.preHandler), preHandler(engine)] as RouteOptions['preHandler'];
  route.errorHandler = errorHandler(engine, route.errorHandler);
  route.onSend = [...hooks(route.onSend), onSend()] as RouteOptions['onSend'];
}

function hooks(value: unknown): unknown[] {
  return value === undefined || value === null ? [] : Array.isArray(value) ? value : [value];
}

/**
 * The hooks that never wait (onRequest, preParsing, preValidation, and onSend on a request idem
 * did not run) take Fastify's `done` callback instead of returning a promise: Fastify then goes on
 * in the same turn, without a promise and a microtask per hook (with an AsyncLocalStorage in the
 * process, every promise also runs its init hook). One that answers sends the reply and does not
 * call `done`, as Fastify's callback hooks do.
 */
type Done = (error?: Error | null) => void;

function onRequest(engine: HttpIdempotency<FastifyRequest>) {
  return function idemOnRequest(request: FastifyRequest, reply: FastifyReply, done: Done): void {
    if (!engine.covers(request.method)) return done();
    const key = engine.readKey(rawHeaderValues(request.raw.rawHeaders, engine.options.keyHeader));
    if (key.kind === 'pass') return done();
    if (key.kind === 'answer') return void send(reply, key.response);
    const tooLarge = engine.checkLength(declaredLength(request.headers['content-length']));
    if (tooLarge) return void send(reply, tooLarge);
    (request as WithState)[stateKey] = { key: key.key };
    done();
  };
}

/**
 * A body sent without a `Content-Length` is counted as it streams in and refused once it passes
 * `maxBodyBytes` (a declared length over it was refused in onRequest, and Node never delivers more
 * bytes than were declared). Fastify's own limit still applies to what passes: the smaller wins.
 */
function preParsing(engine: HttpIdempotency<FastifyRequest>) {
  return function idemPreParsing(
    request: FastifyRequest,
    _reply: FastifyReply,
    payload: Payload,
    done: (error: Error | null, payload?: Payload) => void,
  ): void {
    const state = (request as WithState)[stateKey];
    if (!state?.key || request.headers['content-length'] !== undefined) return done(null, payload);
    done(null, limitedPayload(payload, engine.options.maxBodyBytes));
  };
}

/**
 * The fingerprint is taken over the body as the client sent it (parsed, after the application's
 * own preValidation hooks), before the route's schema validation runs: Fastify's validator coerces
 * types, fills defaults and removes unknown properties in place by default, which would make
 * `{"amount":"12"}` and `{"amount":12}`, or two bodies that differ only in a removed property,
 * look like one request. Every field the handler can see comes from this body, so a retry that
 * changes any of them is a 422.
 */
function preValidation(engine: HttpIdempotency<FastifyRequest>) {
  return function idemPreValidation(request: FastifyRequest, _reply: FastifyReply, done: Done): void {
    const state = (request as WithState)[stateKey];
    if (state?.key) {
      try {
        state.parts = requestParts(request);
        state.fingerprint = { ok: true, value: engine.fingerprint(state.parts, request.body) };
      } catch (error) {
        state.fingerprint = { ok: false, detail: error instanceof Error ? error.message : String(error) };
      }
    }
    done();
  };
}

function preHandler(engine: HttpIdempotency<FastifyRequest>) {
  return async function idemPreHandler(request: FastifyRequest, reply: FastifyReply) {
    const state = (request as WithState)[stateKey];
    if (!state?.key) return;
    const view: RequestView<FastifyRequest> = {
      native: request,
      ...(state.parts ?? requestParts(request)),
      keyFields: [],
      contentLength: undefined,
      traceparent: firstHeader(request.headers.traceparent),
    };
    const fingerprint = state.fingerprint;
    if (fingerprint && !fingerprint.ok) return send(reply, engine.bodyMalformed(fingerprint.detail));
    // Awaited only when the tenant resolver returned a promise: a replay is one read, and each
    // promise on its way costs it more than its SQL (see `observe` in observability/events.ts).
    let scoped = engine.scope(view, state.key);
    if (isPromiseLike(scoped)) scoped = await scoped;
    if (scoped.kind === 'answer') return send(reply, scoped.response);
    const { ticket } = scoped;
    const options = fingerprint ? { fingerprint: fingerprint.value } : {};
    // Either the handler may run now (the key is claimed: null), or the request is answered
    // without it. The handler runs after this hook returns, in the request's async context.
    const first = await new Promise<Answer | null>((resolve, reject) => {
      const answer = engine.execute(
        ticket,
        request.body,
        (context) => {
          const captured = deferred<CapturedResponse>();
          request.idem = context;
          state.captured = captured;
          resolve(null);
          return captured.promise;
        },
        options,
      );
      state.answer = answer;
      answer.then(resolve, reject);
    });
    if (first === null) return;
    state.answer = undefined;
    return send(reply, first.response);
  };
}

/** Method, route pattern, path and query of a request, as the engine names them. */
interface RequestParts {
  method: string;
  route: string;
  path: string;
  query: string;
}

function requestParts(request: FastifyRequest): RequestParts {
  const [path = '/', query = ''] = request.url.split('?', 2);
  return { method: request.method, route: request.routeOptions.url ?? '', path, query };
}

/** A header's value as Node parsed it (a repeated header may be an array). */
function firstHeader(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

type Payload = NodeJS.ReadableStream & { receivedEncodedLength?: number };

/** Fastify's code for a body over its limit, so the application's own error handling knows it too. */
class BodyLimitExceeded extends Error {
  readonly code = 'FST_ERR_CTP_BODY_TOO_LARGE';
  readonly statusCode = 413;
  constructor(readonly limit: number) {
    super(`Request body is too large (over ${limit} bytes)`);
  }
}

/** `payload` passed through, erroring with `BodyLimitExceeded` once more than `limit` bytes went by. */
function limitedPayload(payload: Payload, limit: number): Payload {
  let received = 0;
  const limited: Payload = new Transform({
    transform(chunk: Buffer | string, _encoding, callback) {
      received += typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length;
      if (received > limit) callback(new BodyLimitExceeded(limit));
      else callback(null, chunk);
    },
  });
  // Fastify compares a decoding preParsing stream's encoded length with its limit; keep it visible.
  Object.defineProperty(limited, 'receivedEncodedLength', { get: () => payload.receivedEncodedLength });
  payload.on('error', (error: Error) => (limited as Transform).destroy(error));
  payload.pipe(limited as Transform);
  return limited;
}

type RouteErrorHandler = NonNullable<RouteOptions['errorHandler']>;

/**
 * The route's error handler. Fastify refuses a body (media type without a parser, too large, not
 * JSON, shorter or longer than its Content-Length) before any hook of idem sees it and answers with
 * its own `application/json` error; on a keyed request idem answers those with its problem
 * documents instead, like every other refusal of the contract. Nothing was claimed yet, so
 * nothing is stored. Any other error (the handler's, an authentication hook's, schema validation)
 * is the application's: it goes to the route's own `errorHandler` if it has one, otherwise it is
 * thrown on, which hands it to the scope's handler (`setErrorHandler`, or Fastify's default).
 */
function errorHandler(
  engine: HttpIdempotency<FastifyRequest>,
  own: RouteErrorHandler | undefined,
): RouteErrorHandler {
  return function idemErrorHandler(
    this: FastifyInstance,
    error: FastifyError,
    request: FastifyRequest,
    reply: FastifyReply,
  ) {
    const state = (request as WithState)[stateKey];
    const problem = state?.key && !state.captured ? bodyProblem(engine, request, error) : null;
    if (problem) return void send(reply, problem);
    if (own) return own.call(this, error, request, reply);
    throw error;
  };
}

/** The problem for one of Fastify's body refusals (error codes of its content-type parser), or null. */
function bodyProblem(
  engine: HttpIdempotency<FastifyRequest>,
  request: FastifyRequest,
  error: FastifyError,
): CapturedResponse | null {
  switch (error.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return engine.problem(
        'media-type-unsupported',
        "this route has no parser for the request body's Content-Type; nothing was stored",
      );
    case 'FST_ERR_CTP_BODY_TOO_LARGE': {
      const limit = error instanceof BodyLimitExceeded ? error.limit : request.routeOptions.bodyLimit;
      return engine.problem(
        'body-too-large',
        `the request body is larger than ${limit ?? engine.options.maxBodyBytes} bytes; nothing was stored`,
      );
    }
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return engine.bodyMalformed('the request body is not valid JSON');
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return engine.bodyMalformed('the request body does not match its Content-Length');
    default:
      return null;
  }
}

function onSend() {
  return function idemOnSend(
    request: FastifyRequest,
    reply: FastifyReply,
    payload: unknown,
    done: (error: Error | null, payload?: unknown) => void,
  ): Promise<unknown> | void {
    const state = (request as WithState)[stateKey];
    if (!state?.captured || !state.answer) return done(null, payload);
    // Returned, not passed to `done`: Fastify sends what the promise resolves to (or its error).
    return settleReply(reply, state, state.captured, state.answer, payload);
  };
}

/** onSend of a request whose handler ran under a claimed key: store, commit, then what to send. */
async function settleReply(
  reply: FastifyReply,
  state: RequestState,
  captured: Deferred<CapturedResponse>,
  pending: Promise<Answer>,
  payload: unknown,
): Promise<Buffer> {
  const response = await capture(reply, payload);
  captured.resolve(response);
  const answer = await pending;
  state.answer = undefined; // this request's reply is settled
  if (answer.kind === 'handler') {
    const { body } = answer.response;
    return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  }
  return replaceReply(reply, answer.response);
}

/** The reply as the client would get it: Fastify's status and headers, the payload as bytes. */
async function capture(reply: FastifyReply, payload: unknown): Promise<CapturedResponse> {
  if (payload instanceof Response) {
    // Fastify applies a Response's status and headers after onSend; apply them now instead.
    reply.code(payload.status);
    payload.headers.forEach((value, name) => {
      if (name !== 'set-cookie') void reply.header(name, value);
    });
    const cookies = payload.headers.getSetCookie();
    if (cookies.length) void reply.header('set-cookie', cookies);
    payload = new Uint8Array(await payload.arrayBuffer());
  }
  return {
    status: reply.statusCode,
    headers: headerPairs(reply.getHeaders()).filter(([name]) => name !== 'content-length'),
    body: await payloadBytes(payload),
  };
}

async function payloadBytes(payload: unknown): Promise<Uint8Array> {
  if (payload === undefined || payload === null) return new Uint8Array(0);
  if (typeof payload === 'string') return Buffer.from(payload, 'utf8');
  if (payload instanceof Uint8Array) return payload;
  const chunks: Buffer[] = [];
  if (typeof (payload as ReadableStream).getReader === 'function') {
    const reader = (payload as ReadableStream<Uint8Array>).getReader();
    for (let r = await reader.read(); !r.done; r = await reader.read()) chunks.push(Buffer.from(r.value));
    return Buffer.concat(chunks);
  }
  if (typeof (payload as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function') {
    for await (const chunk of payload as AsyncIterable<Buffer | string>) {
      chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk));
    }
    return Buffer.concat(chunks);
  }
  throw new InvalidArgumentError('unsupported reply payload: send a string, a Buffer, a stream or JSON');
}

/** Drops every header set so far and makes the reply `response` (used in onSend). */
function replaceReply(reply: FastifyReply, response: CapturedResponse): Buffer {
  for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
  reply.code(response.status);
  for (const [name, value] of Object.entries(headerMap(response.headers))) void reply.header(name, value);
  const { body } = response;
  return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
}

/** Answers from a hook, without the handler. */
function send(reply: FastifyReply, response: CapturedResponse): FastifyReply {
  reply.code(response.status);
  for (const [name, value] of Object.entries(headerMap(response.headers))) void reply.header(name, value);
  const { body } = response;
  return reply.send(Buffer.from(body.buffer, body.byteOffset, body.byteLength));
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}
