/**
 * A real HTTP provider on 127.0.0.1 (a card processor, say) that honours its own Idempotency-Key:
 * one effect per key and path, however many calls. It records every call, and can be told to do
 * the work and then drop the connection without answering: the response-lost case, seen from the
 * caller.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';

export interface ProviderCall {
  path: string;
  key: string | undefined;
}

export interface Provider {
  url: string;
  calls: ProviderCall[];
  /** Effects per path: key → result id. */
  effects: Map<string, Map<string, string>>;
  /** The next call to `path` performs its effect, then the connection is destroyed unanswered. */
  dropResponseOnce(path: string): void;
  /** POSTs to the provider with `key`; throws on a dropped connection (a retryable socket error). */
  call(path: string, key: string): Promise<{ id: string }>;
  close(): Promise<void>;
}

/** Calls a provider at `url` (from this process or another one). */
export function providerCall(url: string): Provider['call'] {
  return async (path, key) => {
    const response = await request(`${url}${path}`, {
      method: 'POST',
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
      body: '{}',
    });
    if (response.statusCode !== 200) throw new Error(`provider answered ${response.statusCode}`);
    return (await response.body.json()) as { id: string };
  };
}

export async function startProvider(): Promise<Provider> {
  const calls: ProviderCall[] = [];
  const effects = new Map<string, Map<string, string>>();
  const drop = new Set<string>();
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const path = req.url ?? '/';
      const key = req.headers['idempotency-key'] as string | undefined;
      calls.push({ path, key });
      if (!key) {
        res.writeHead(400).end();
        return;
      }
      let byKey = effects.get(path);
      if (!byKey) effects.set(path, (byKey = new Map<string, string>()));
      let id = byKey.get(key);
      if (!id) {
        id = `${path.slice(1)}_${byKey.size + 1}`;
        byKey.set(key, id);
      }
      if (drop.delete(path)) {
        req.socket.destroy();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    calls,
    effects,
    dropResponseOnce: (path) => drop.add(path),
    call: providerCall(url),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
