/**
 * Holds back a Node `ServerResponse` (Express and plain node:http) until the operation commits.
 * While captured, `writeHead`, `write`, `end` and `flushHeaders` of this one response object buffer
 * instead of writing; headers set with `setHeader` stay on the response as usual. When the handler
 * calls `end`, the captured status, headers and body bytes are handed to the engine, which stores
 * them and commits; only then does `release` put the real methods back and send.
 *
 * The same approach as Express's own compression middleware (it wraps `write`/`end` of the
 * response), so a handler's `res.json`, `res.send`, `stream.pipe(res)` and `res.writeHead(...).end()`
 * all work unchanged. The whole body is buffered: covered routes are not for streaming responses.
 */
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { InvalidArgumentError } from '../core/errors.js';
import type { CapturedResponse } from './captured-response.js';
import { headerMap, headerPairs } from './response-headers.js';

export interface NodeResponseCapture {
  /** Resolves when the handler ends the response. */
  readonly done: Promise<CapturedResponse>;
  /** Puts the real methods back and sends the captured response as the handler made it. */
  release(): void;
  /** Puts the real methods back, drops the headers the handler set, and sends `response` instead. */
  replace(response: CapturedResponse): void;
}

export function captureNodeResponse(res: ServerResponse): NodeResponseCapture {
  // Saved to be put back on this same object (and so called with it as `this`); they may be another
  // middleware's wrappers rather than the prototype's methods.
  /* eslint-disable @typescript-eslint/unbound-method */
  const original = {
    writeHead: res.writeHead,
    write: res.write,
    end: res.end,
    flushHeaders: res.flushHeaders,
  };
  /* eslint-enable @typescript-eslint/unbound-method */
  const headersBefore = { ...res.getHeaders() };
  const chunks: Buffer[] = [];
  let ended = false;
  let endCallback: (() => void) | undefined;
  let resolveDone!: (response: CapturedResponse) => void;
  const done = new Promise<CapturedResponse>((resolve) => (resolveDone = resolve));

  const append = (chunk: unknown, encoding?: BufferEncoding) => {
    if (chunk === undefined || chunk === null) return;
    if (typeof chunk === 'string') chunks.push(Buffer.from(chunk, encoding ?? 'utf8'));
    else if (chunk instanceof Uint8Array)
      chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    else throw new InvalidArgumentError('response chunk must be a string, Buffer or Uint8Array');
  };

  res.writeHead = function writeHead(
    this: ServerResponse,
    status: number,
    reasonOrHeaders?: string | OutgoingHttpHeaders | (string | string[])[],
    maybeHeaders?: OutgoingHttpHeaders | (string | string[])[],
  ) {
    res.statusCode = status;
    let headers = maybeHeaders;
    if (typeof reasonOrHeaders === 'string') res.statusMessage = reasonOrHeaders;
    else headers = reasonOrHeaders;
    if (Array.isArray(headers)) {
      // Raw form: [name, value, name, value, ...]
      const pairs: [string, string][] = [];
      for (let i = 0; i + 1 < headers.length; i += 2) {
        pairs.push([String(headers[i]).toLowerCase(), String(headers[i + 1])]);
      }
      for (const [name, value] of Object.entries(headerMap(pairs))) res.setHeader(name, value);
    } else if (headers) {
      for (const [name, value] of Object.entries(headers)) {
        if (value !== undefined) res.setHeader(name, value);
      }
    }
    return res;
  } as ServerResponse['writeHead'];

  res.write = function write(chunk: unknown, encoding?: unknown, callback?: unknown): boolean {
    if (typeof encoding === 'function') [callback, encoding] = [encoding, undefined];
    append(chunk, encoding as BufferEncoding | undefined);
    if (typeof callback === 'function') process.nextTick(callback);
    return true;
  } as ServerResponse['write'];

  res.end = function end(chunk?: unknown, encoding?: unknown, callback?: unknown) {
    if (typeof chunk === 'function') [callback, chunk] = [chunk, undefined];
    if (typeof encoding === 'function') [callback, encoding] = [encoding, undefined];
    if (ended) return res;
    ended = true;
    append(chunk, encoding as BufferEncoding | undefined);
    if (typeof callback === 'function') endCallback = callback as () => void;
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    resolveDone({ status: res.statusCode, headers: headerPairs(res.getHeaders()), body });
    return res;
  } as ServerResponse['end'];

  res.flushHeaders = () => undefined;

  const restore = () => {
    res.writeHead = original.writeHead;
    res.write = original.write;
    res.end = original.end;
    res.flushHeaders = original.flushHeaders;
  };

  return {
    done,
    release() {
      restore();
      const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      res.end(body, endCallback);
    },
    replace(response) {
      restore();
      for (const name of res.getHeaderNames()) res.removeHeader(name);
      for (const [name, value] of Object.entries(headersBefore)) {
        if (value !== undefined) res.setHeader(name, value);
      }
      writeNodeResponse(res, response);
    },
  };
}

/** Sends a complete response on a Node `ServerResponse` that has not started. */
export function writeNodeResponse(res: ServerResponse, response: CapturedResponse): void {
  res.statusCode = response.status;
  for (const [name, value] of Object.entries(headerMap(response.headers))) res.setHeader(name, value);
  const { body } = response;
  res.end(Buffer.from(body.buffer, body.byteOffset, body.byteLength));
}

/** Values of every field line named `name` (lower-case), from Node's `rawHeaders`. */
export function rawHeaderValues(rawHeaders: readonly string[], name: string): string[] {
  const values: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.toLowerCase() === name) values.push(rawHeaders[i + 1]!);
  }
  return values;
}
