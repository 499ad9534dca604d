/**
 * Reading a request body with a byte limit, and parsing it by content type. Used by the
 * integrations that read the body themselves (node:http, Hono, and Express when no body parser ran
 * first); Fastify parses with its own content-type parsers and `bodyLimit`.
 */
import type { Readable } from 'node:stream';
import { IdemError, isIdemError } from '../core/errors.js';
import { readNodeStream, readWebStream } from '../core/read-stream.js';
import type { CapturedResponse } from './captured-response.js';

/** Thrown by the readers when the body passes the limit (answered 413). */
export class BodyTooLargeError extends IdemError {
  constructor(readonly limit: number) {
    super('IDEM_BODY_TOO_LARGE', `request body is larger than ${limit} bytes`);
  }
}

/** Thrown by `parseBody` when a JSON body does not parse (answered 400). */
export class BodyMalformedError extends IdemError {
  constructor(message: string, cause?: unknown) {
    super('IDEM_BODY_MALFORMED', message, { cause });
  }
}

/**
 * True for a `BodyTooLargeError`, from any copy of the package.
 *
 * @example
 * try {
 *   body = await readNodeBody(req, 1_048_576);
 * } catch (error) {
 *   if (isBodyTooLarge(error)) return reply413(error.limit);
 *   throw error;
 * }
 */
export const isBodyTooLarge = (e: unknown): e is BodyTooLargeError =>
  isIdemError(e) && e.code === 'IDEM_BODY_TOO_LARGE';

/**
 * True for a `BodyMalformedError`, from any copy of the package.
 *
 * @example
 * try {
 *   body = parseBody(bytes, req.headers['content-type']);
 * } catch (error) {
 *   if (isBodyMalformed(error)) return reply400(error.message);
 *   throw error;
 * }
 */
export const isBodyMalformed = (e: unknown): e is BodyMalformedError =>
  isIdemError(e) && e.code === 'IDEM_BODY_MALFORMED';

/**
 * Reads a Node stream to the end, refusing it with `BodyTooLargeError` as soon as it passes
 * `limit` bytes; the rest is drained and discarded, so the connection stays usable for the 413.
 */
export function readNodeBody(stream: Readable, limit: number): Promise<Uint8Array> {
  return readNodeStream(stream, limit, () => new BodyTooLargeError(limit));
}

/** Reads a web `ReadableStream` (a fetch `Request` body) with the same limit rule. */
export function readWebBody(stream: ReadableStream<Uint8Array> | null, limit: number): Promise<Uint8Array> {
  return readWebStream(stream, limit, () => new BodyTooLargeError(limit));
}

/** The `Content-Length` of a request, or undefined when absent or not a number. */
export function declaredLength(value: string | null | undefined): number | undefined {
  if (value == null || !/^\d+$/.test(value.trim())) return undefined;
  return Number(value);
}

/**
 * The body as a handler expects it: JSON media types (`application/json`, `*+json`) parsed,
 * `text/*` and `application/x-www-form-urlencoded` as a string, anything else as a Buffer.
 * An empty body is `undefined`. Malformed JSON throws `BodyMalformedError`.
 */
export function parseBody(bytes: Uint8Array, contentType: string | null | undefined): unknown {
  if (bytes.byteLength === 0) return undefined;
  const media = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (media === 'application/json' || media.endsWith('+json')) {
    try {
      return JSON.parse(buffer.toString('utf8')) as unknown;
    } catch (error) {
      throw new BodyMalformedError(`request body is not valid JSON: ${(error as Error).message}`, error);
    }
  }
  if (media.startsWith('text/') || media === 'application/x-www-form-urlencoded') {
    return buffer.toString('utf8');
  }
  return buffer;
}

/** The engine's answers to a body the readers refused: 413 past the limit, 400 for malformed JSON. */
export interface BodyRefusals {
  bodyTooLarge(): CapturedResponse;
  bodyMalformed(detail: string): CapturedResponse;
}

/**
 * Reads the body with `read` and parses it by `contentType`. A body past the limit or malformed
 * comes back as the problem to send instead; any other error (the connection failed) is thrown.
 */
export async function readRequestBody(
  refusals: BodyRefusals,
  read: () => Promise<Uint8Array>,
  contentType: string | null | undefined,
): Promise<{ body: unknown } | { problem: CapturedResponse }> {
  try {
    return { body: parseBody(await read(), contentType) };
  } catch (error) {
    if (isBodyTooLarge(error)) return { problem: refusals.bodyTooLarge() };
    if (isBodyMalformed(error)) return { problem: refusals.bodyMalformed(error.message) };
    throw error;
  }
}
