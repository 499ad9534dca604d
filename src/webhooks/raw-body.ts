/**
 * Reading the exact bytes of a request, with a limit, and refusing loudly when something else
 * already read or parsed them: a body re-serialised by a JSON parser is not the body that was
 * signed, and verifying it would reject authentic deliveries (or, worse, accept a re-encoding).
 */
import type { IncomingMessage } from 'node:http';
import { readNodeStream, readWebStream } from '../core/read-stream.js';
import { RawBodyUnavailableError, WebhookBodyTooLargeError } from './errors.js';

/** Throws 413 when a declared Content-Length is already over the limit. */
export function checkDeclaredLength(contentLength: string | null | undefined, limit: number): void {
  if (contentLength === undefined || contentLength === null || !/^\d+$/.test(contentLength)) return;
  if (Number(contentLength) > limit) throw new WebhookBodyTooLargeError(limit);
}

/**
 * Reads a Node request stream to its end, refusing more than `limit` bytes. Throws
 * `RawBodyUnavailableError` when the stream was already read (a body parser ran first).
 */
export async function readNodeBody(request: IncomingMessage, limit: number): Promise<Uint8Array> {
  checkDeclaredLength(request.headers['content-length'], limit);
  if (request.readableDidRead || request.readableEnded) {
    throw new RawBodyUnavailableError(
      'the request body was already read by another middleware; mount the webhook route before body parsers',
    );
  }
  return readNodeStream(request, limit, () => new WebhookBodyTooLargeError(limit));
}

/** Reads a Fetch body stream (Hono, Request) to its end, refusing more than `limit` bytes. */
export function readWebBody(body: ReadableStream<Uint8Array> | null, limit: number): Promise<Uint8Array> {
  return readWebStream(body, limit, () => new WebhookBodyTooLargeError(limit));
}

/** The message for a body some parser turned into something other than bytes. */
export function parsedBodyMessage(framework: string, fix: string): string {
  return `the ${framework} request body was already parsed (not raw bytes), so the signed bytes are gone; ${fix}`;
}
