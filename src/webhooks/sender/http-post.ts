/**
 * One webhook attempt over node:http / node:https, connecting only where the destination policy
 * allows: a host name goes through the policy's `lookup` (checked at connect time, on every address
 * it resolves to), an IP literal is checked before the request (Node connects to a literal without
 * a lookup). Redirects are never followed: a 3xx is the answer.
 *
 * Not `fetch`: its connections cannot be given a lookup without a dispatcher from the `undici`
 * package matching Node's own copy, and node:http's `lookup` option is the documented hook.
 */
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { DestinationPolicy } from './destination.js';

/** What an attempt needs from an answer. */
export interface PostAnswer {
  status: number;
  retryAfter: string | undefined;
}

/** Bytes of an answer's body read (and dropped) before the connection is closed instead. */
const maxDrainedBytes = 64 * 1024;

export class WebhookHttpClient {
  // Agents of our own: a pooled connection is reused only for connections made through the policy,
  // never for one another part of the process opened to the same host without it.
  private readonly http = new HttpAgent({ keepAlive: true });
  private readonly https = new HttpsAgent({ keepAlive: true });

  constructor(private readonly policy: DestinationPolicy) {}

  post(
    url: string,
    headers: Record<string, string>,
    body: Uint8Array,
    signal: AbortSignal,
  ): Promise<PostAnswer> {
    const target = new URL(url);
    const refused = this.policy.literalRefusal(target);
    if (refused) return Promise.reject(refused);
    const secure = target.protocol === 'https:';
    return new Promise<PostAnswer>((resolve, reject) => {
      const request = (secure ? httpsRequest : httpRequest)(target, {
        method: 'POST',
        headers: { ...headers, 'content-length': String(body.byteLength) },
        agent: secure ? this.https : this.http,
        lookup: this.policy.lookup,
        signal,
      });
      request.on('error', reject);
      request.on('response', (response: IncomingMessage) => {
        const retryAfter = response.headers['retry-after'];
        resolve({ status: response.statusCode ?? 0, retryAfter });
        drain(response);
      });
      request.end(body);
    });
  }

  /** Closes pooled connections. */
  close(): void {
    this.http.destroy();
    this.https.destroy();
  }
}

/** Reads a small answer to its end so its connection can be reused; closes it on a large one. */
function drain(response: IncomingMessage): void {
  let read = 0;
  response.on('error', () => undefined);
  response.on('data', (chunk: Buffer) => {
    read += chunk.length;
    if (read > maxDrainedBytes) response.destroy();
  });
}
