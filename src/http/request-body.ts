/**
 * Reading a request body with a byte limit, and parsing it by content type. Used by the
 * integrations that read the body themselves (node:http, Hono, and Express when no body parser ran
 * first); Fastify parses with its own content-type parsers and `bodyLimit`.
 */
import type { Readable } from 'node:stream';
import { readWebStream } from '../core/read-stream.js';
import type { CapturedResponse } from './captured-response.js';

/** Thrown by the readers when the body passes the limit. */
export class BodyTooLargeError extends Error {
  constructor(readonly limit: number) {
    super(`request body is larger than ${limit} bytes`);
  }
}

/** Thrown by `parseBody` when a JSON body does not parse. */
export class BodyMalformedError extends Error {}

/**
 * Reads a Node stream to the end, refusing it as soon as it passes `limit` bytes. On refusal the
 * rest of the stream is drained and discarded, so the connection stays usable for the 413 answer.
 */
export function readNodeBody(stream: Readable, limit: number): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const cleanup = () => {
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('error', onError);
    };
    const onData = (chunk: Buffer | string) => {
      const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      size += buffer.length;
      if (size > limit) {
        cleanup();
        stream.resume();
        reject(new BodyTooLargeError(limit));
        return;
      }
      chunks.push(buffer);
    };
    const onEnd = () => {
      cleanup();
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const onError = (error: Error) => {
      cleanup();
      reject(error);
    };
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', onError);
  });
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
      throw new BodyMalformedError(`request body is not valid JSON: ${(error as Error).message}`);
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
    if (error instanceof BodyTooLargeError) return { problem: refusals.bodyTooLarge() };
    if (error instanceof BodyMalformedError) return { problem: refusals.bodyMalformed(error.message) };
    throw error;
  }
}
