/**
 * A downstream "provider" on 127.0.0.1 for tests: a real HTTP server that honours
 * Idempotency-Key the way payment APIs do (the first answer is stored and replayed for the same
 * key) and counts business effects, so a test can assert "one effect" instead of "one call".
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A scripted answer, used instead of the normal behaviour for the next request(s). */
export interface Scripted {
  status: number;
  headers?: Record<string, string>;
  /** Apply the effect first, then answer with this status (the "lost response" case). */
  afterEffect?: boolean;
  /** Wait this long before answering (real ms). */
  delayMs?: number;
  /** Destroy the socket instead of answering (the client sees a network error). */
  destroy?: boolean;
}

export interface ReceivedRequest {
  method: string;
  path: string;
  key: string | null;
  rawKey: string | null;
  body: string;
}

export class Provider {
  readonly requests: ReceivedRequest[] = [];
  /** Effects applied, by "kind" (the first path segment after /effects/) and key. */
  readonly effects: { kind: string; key: string; body: string }[] = [];
  private readonly stored = new Map<string, { status: number; body: string }>();
  private readonly script: Scripted[] = [];
  private readonly broken = new Map<string, number>();
  private server!: Server;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      void this.handle(req, res);
    });
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Answers the next requests from this list, in order, before behaving normally again. */
  respond(...answers: Scripted[]): this {
    this.script.push(...answers);
    return this;
  }

  /** Answers every request whose path starts with `prefix` with `status`, without effect, until fixed. */
  breakPath(prefix: string, status: number): this {
    this.broken.set(prefix, status);
    return this;
  }

  fixPath(prefix: string): this {
    this.broken.delete(prefix);
    return this;
  }

  effectsOf(kind: string): number {
    return this.effects.filter((e) => e.kind === kind).length;
  }

  effectsFor(key: string): number {
    return this.effects.filter((e) => e.key === key).length;
  }

  requestsWith(key: string): number {
    return this.requests.filter((r) => r.key === key).length;
  }

  reset(): void {
    this.requests.length = 0;
    this.effects.length = 0;
    this.stored.clear();
    this.script.length = 0;
    this.broken.clear();
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    const rawKey = (req.headers['idempotency-key'] as string | undefined) ?? null;
    // The IETF draft sends a structured-field string ("..."); Stripe-style clients send it bare.
    const key = rawKey === null ? null : rawKey.replace(/^"(.*)"$/, '$1');
    const path = req.url ?? '/';
    this.requests.push({ method: req.method ?? 'GET', path, key, rawKey, body });
    for (const [prefix, status] of this.broken) {
      if (path.startsWith(prefix)) {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ broken: status }));
        return;
      }
    }
    const scripted = this.script.shift();
    if (scripted?.delayMs) await new Promise((resolve) => setTimeout(resolve, scripted.delayMs));
    if (scripted?.destroy) {
      req.socket.destroy();
      return;
    }
    if (scripted && !scripted.afterEffect) {
      res.writeHead(scripted.status, { 'content-type': 'application/json', ...scripted.headers });
      res.end(JSON.stringify({ scripted: scripted.status }));
      return;
    }
    const match = /^\/effects\/([\w-]+)/.exec(path);
    if (!match || req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ok: true, path }));
      return;
    }
    if (key === null) {
      // Without a key every request is a new effect: what a non-idempotent POST does.
      this.effects.push({ kind: match[1]!, key: '', body });
      res.writeHead(scripted?.status ?? 201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: this.effects.length }));
      return;
    }
    let answer = this.stored.get(key);
    let replayed = true;
    if (!answer) {
      replayed = false;
      this.effects.push({ kind: match[1]!, key, body });
      answer = { status: 201, body: JSON.stringify({ id: `${match[1]}_${this.effects.length}`, key }) };
      this.stored.set(key, answer);
    }
    if (scripted?.afterEffect) {
      res.writeHead(scripted.status, { 'content-type': 'application/json', ...scripted.headers });
      res.end(JSON.stringify({ scripted: scripted.status }));
      return;
    }
    res.writeHead(answer.status, {
      'content-type': 'application/json',
      ...(replayed ? { 'idempotent-replayed': 'true' } : {}),
    });
    res.end(answer.body);
  }
}

export async function startProvider(): Promise<Provider> {
  return new Provider().start();
}
