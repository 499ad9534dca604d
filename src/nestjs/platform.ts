/**
 * What differs between @nestjs/platform-express and @nestjs/platform-fastify, in one place: the
 * raw Node request and response under the platform's objects, the route pattern, the body, and
 * how to send a complete response from an exception filter. Everything else is the engine's.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HttpIdempotency, RequestView } from '../http/engine.js';
import { writeNodeResponse } from '../http/node-response-capture.js';
import { nodeRequestView } from '../http/node-request.js';
import type { CapturedResponse } from '../http/options.js';
import { declaredLength, readNodeBody, readRequestBody } from '../http/request-body.js';
import { headerMap } from '../http/response-headers.js';

/** An Express request (an IncomingMessage itself) or a Fastify request (with `raw`). */
interface PlatformRequest {
  raw?: IncomingMessage;
  method: string;
  body?: unknown;
  /** Kept by Nest when the app is created with `{ rawBody: true }` (JSON and urlencoded bodies). */
  rawBody?: Buffer;
  /** Express */
  originalUrl?: string;
  baseUrl?: string;
  route?: { path?: unknown };
  /** Fastify */
  url?: string;
  routeOptions?: { url?: string };
}

/** An Express response (a ServerResponse itself) or a Fastify reply (with `raw`). */
interface PlatformResponse {
  raw?: ServerResponse;
  code?(status: number): PlatformResponse;
  header?(name: string, value: string | string[]): PlatformResponse;
  send?(payload: Buffer): unknown;
}

export function rawRequestOf(request: unknown): IncomingMessage {
  const r = request as PlatformRequest;
  return r.raw ?? (request as IncomingMessage);
}

export function rawResponseOf(response: unknown): ServerResponse {
  const r = response as PlatformResponse;
  return r.raw ?? (response as ServerResponse);
}

function isFastify(request: unknown): boolean {
  return (request as PlatformRequest).raw !== undefined;
}

/** The matched route pattern (`/orders/:id`), with Express's mount path or Fastify's prefix. */
function routeOf(request: PlatformRequest): string | undefined {
  if (isFastify(request)) return request.routeOptions?.url;
  const path = request.route?.path;
  if (typeof path !== 'string') return undefined;
  return `${request.baseUrl ?? ''}${path}`;
}

/** The request as the engine sees it. */
export function requestView<Req>(request: Req, header: string): RequestView<Req> {
  const r = request as PlatformRequest;
  const raw = rawRequestOf(request);
  const url = (isFastify(request) ? r.url : r.originalUrl) ?? raw.url ?? '/';
  return nodeRequestView(request, raw, { method: r.method, url, route: routeOf(r) }, header);
}

/**
 * The request body for the fingerprint, or the problem to answer instead. Nest's parsers have run
 * before any interceptor: JSON and urlencoded bodies are parsed already, and their size is known
 * from the declared length, or from `rawBody` when the app keeps it. A body no parser took (text
 * or binary on Express) is still unread: it is read here within `maxBodyBytes` and handed to
 * `@Body()`.
 */
export async function requestBody<Req>(
  request: Req,
  engine: HttpIdempotency<Req>,
): Promise<{ body: unknown } | { problem: CapturedResponse }> {
  const r = request as PlatformRequest;
  const raw = rawRequestOf(request);
  if (Buffer.isBuffer(r.rawBody) && r.rawBody.length > engine.options.maxBodyBytes) {
    return { problem: engine.bodyTooLarge() };
  }
  if (r.body !== undefined || isFastify(request) || !hasUnreadBody(raw)) return { body: r.body };
  const limit = engine.options.maxBodyBytes;
  const read = await readRequestBody(engine, () => readNodeBody(raw, limit), raw.headers['content-type']);
  if ('body' in read) r.body = read.body;
  return read;
}

function hasUnreadBody(raw: IncomingMessage): boolean {
  if (raw.readableEnded || raw.readableDidRead) return false;
  return (
    raw.headers['transfer-encoding'] !== undefined || (declaredLength(raw.headers['content-length']) ?? 0) > 0
  );
}

/** Sends `response` as it is, through Fastify's reply or straight on Express's response. */
export function sendComplete(response: unknown, captured: CapturedResponse): void {
  const reply = response as PlatformResponse;
  const { body } = captured;
  const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (reply.raw && reply.code && reply.header && reply.send) {
    reply.code(captured.status);
    for (const [name, value] of Object.entries(headerMap(captured.headers))) reply.header(name, value);
    reply.send(bytes);
    return;
  }
  writeNodeResponse(response as ServerResponse, captured);
}
