/**
 * How one attempt reaches an endpoint: idem's node:http client, which checks destinations at
 * connect time, or a caller's `fetch` (then only an IP-literal host is checked). Each attempt has
 * its own timeout; a redirect is never followed: it is a failed attempt (update the endpoint's URL).
 */
import type { DestinationPolicy } from './destination.js';
import { WebhookHttpClient, type PostAnswer } from './http-post.js';

export class AttemptTransport {
  private readonly client: WebhookHttpClient;

  constructor(
    private readonly destinations: DestinationPolicy,
    private readonly timeoutMs: number,
    private readonly customFetch: typeof globalThis.fetch | undefined,
  ) {
    this.client = new WebhookHttpClient(destinations);
  }

  /** One attempt: POSTs `body` and answers with the status and `Retry-After`. */
  async post(url: string, headers: Record<string, string>, body: Uint8Array): Promise<PostAnswer> {
    const signal = AbortSignal.timeout(this.timeoutMs);
    if (!this.customFetch) return this.client.post(url, headers, body, signal);
    const refused = this.destinations.literalRefusal(new URL(url));
    if (refused) throw refused;
    const response = await this.customFetch(url, {
      method: 'POST',
      headers,
      body: body as Uint8Array<ArrayBuffer>,
      redirect: 'manual',
      signal,
    });
    // The answer's body is not needed; releasing it frees the connection.
    await response.body?.cancel().catch(() => undefined);
    return { status: response.status, retryAfter: response.headers.get('retry-after') ?? undefined };
  }

  /** Closes idle connections. */
  close(): void {
    this.client.close();
  }
}
