import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A real HTTP "card provider" on 127.0.0.1 that honours its own Idempotency-Key: one charge per key,
 * whatever the number of calls. It records every call, so tests can count effects and see keys.
 * `latencyMs` delays every answer (a slow provider).
 */
export interface FakeProvider {
  url: string;
  calls: { key: string | undefined; body: unknown }[];
  charges: Map<string, { id: string; amount: number }>;
  close(): Promise<void>;
}

export async function startFakeProvider(options: { latencyMs?: number } = {}): Promise<FakeProvider> {
  const calls: FakeProvider['calls'] = [];
  const charges = new Map<string, { id: string; amount: number }>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = chunks.length ? (JSON.parse(Buffer.concat(chunks).toString()) as { amount?: number }) : {};
      const key = req.headers['idempotency-key'] as string | undefined;
      calls.push({ key, body });
      if (options.latencyMs) {
        setTimeout(() => answer(key, body), options.latencyMs);
        return;
      }
      answer(key, body);
    });
    const answer = (key: string | undefined, body: { amount?: number }) => {
      if (!key) {
        res.writeHead(400).end();
        return;
      }
      let charge = charges.get(key);
      if (!charge) {
        charge = { id: `ch_${charges.size + 1}`, amount: body.amount ?? 0 };
        charges.set(key, charge);
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(charge));
    };
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    charges,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** Charges `amount` at `provider` under Idempotency-Key `key`: the charge it answers. */
export async function chargeAt(provider: FakeProvider, key: string, amount: number, signal?: AbortSignal) {
  const response = await fetch(`${provider.url}/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ amount }),
    ...(signal ? { signal } : {}),
  });
  return (await response.json()) as { id: string };
}
