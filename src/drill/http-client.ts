/**
 * The drills' HTTP client, on `node:http`/`node:https`. Hand-written rather than `fetch` or undici
 * because the lost-response drill needs the socket: it must close the connection right after the
 * request is flushed and before any answer is read, which `fetch` does not expose. Using one client
 * for every drill keeps the requests alike (same connection handling, same header spelling, empty
 * header values sent as given).
 */
import http from 'node:http';
import https from 'node:https';
import { toNodeHeaders, type HeaderList } from './headers.js';

/** One request as the drills send it. */
export interface OutgoingRequest {
  url: URL;
  method: string;
  headers: HeaderList;
  body: Buffer | null;
}

/** What came back. `status` is 0 when no answer arrived; `error` then says why. */
export interface Answer {
  status: number;
  /** Lower-case names; repeated fields joined with `, `. */
  headers: Record<string, string>;
  body: Buffer;
  ms: number;
  error?: string;
}

/** The outcome of sending a request and closing the connection before the answer. */
export interface CutResult {
  /** The whole request (headers and body) was handed to the operating system before the cut. */
  flushed: boolean;
  /** An answer had already started arriving when the connection was cut (the cut came too late). */
  answeredBeforeCut: boolean;
  ms: number;
  error?: string;
}

export class DrillClient {
  // keepAlive with no socket limit: the concurrency drill's requests must all be in flight at once,
  // not queued behind a per-origin pool.
  private readonly httpAgent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  private readonly httpsAgent = new https.Agent({ keepAlive: true, maxSockets: Infinity });

  constructor(private readonly timeoutMs: number) {}

  /** Sends `request` and reads the whole answer. Never throws: failures come back as status 0. */
  send(request: OutgoingRequest): Promise<Answer> {
    return settleOnce<Answer>(this.timeoutMs, 'no answer', (finish, elapsed) => {
      const fail = (error: Error) =>
        finish({ status: 0, headers: {}, body: Buffer.alloc(0), ms: elapsed(), error: error.message });
      const req = this.module(request.url).request(request.url, {
        method: request.method,
        headers: this.headers(request),
        agent: request.url.protocol === 'https:' ? this.httpsAgent : this.httpAgent,
      });
      req.on('error', fail);
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', fail);
        res.on('end', () =>
          finish({
            status: res.statusCode ?? 0,
            headers: flattenHeaders(res.headers),
            body: Buffer.concat(chunks),
            ms: elapsed(),
          }),
        );
      });
      req.end(request.body ?? undefined);
      return req;
    });
  }

  /**
   * Sends `request` on a connection of its own and destroys the socket as soon as the request is
   * flushed, before reading anything: the server gets the whole request, the client never sees the
   * answer. This is the seed's "response lost in flight".
   */
  sendThenCut(request: OutgoingRequest): Promise<CutResult> {
    return settleOnce<CutResult>(this.timeoutMs, 'not flushed', (finish, elapsed) => {
      let answered = false;
      const req = this.module(request.url).request(request.url, {
        method: request.method,
        headers: this.headers(request),
        agent: false, // a connection of its own: destroying it must not touch pooled sockets
      });
      req.on('response', (res) => {
        answered = true;
        res.resume();
      });
      // After the cut, the aborted request reports an error: that is the point, not a failure.
      req.on('error', (error) =>
        finish({ flushed: false, answeredBeforeCut: answered, ms: elapsed(), error: error.message }),
      );
      req.end(request.body ?? undefined, () => {
        req.destroy();
        finish({ flushed: true, answeredBeforeCut: answered, ms: elapsed() });
      });
      return req;
    });
  }

  /** Closes idle keep-alive sockets so the process can exit. */
  close(): void {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }

  private module(url: URL): typeof http | typeof https {
    return url.protocol === 'https:' ? https : http;
  }

  private headers(request: OutgoingRequest): Record<string, string | string[]> {
    const headers = toNodeHeaders(request.headers);
    // An explicit length: the body goes out in one piece, never chunked, so "flushed" means sent.
    if (request.body) headers['Content-Length'] = String(request.body.length);
    return headers;
  }
}

/**
 * Runs one request: `start` sends it and calls `finish` with its outcome, `elapsed()` giving the
 * milliseconds since the start. The first `finish` settles the promise; a request still unsettled
 * after `timeoutMs` is destroyed with "<what> within <timeoutMs> ms", which its error handler
 * turns into an outcome.
 */
function settleOnce<T>(
  timeoutMs: number,
  what: string,
  start: (finish: (outcome: T) => void, elapsed: () => number) => http.ClientRequest,
): Promise<T> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  return new Promise<T>((resolve) => {
    let done = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = (outcome: T) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve(outcome);
    };
    const req = start(finish, elapsed);
    if (!done) timer = setTimeout(() => req.destroy(new Error(`${what} within ${timeoutMs} ms`)), timeoutMs);
  });
}

function flattenHeaders(headers: http.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}
