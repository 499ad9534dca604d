/**
 * The merchant's load balancer in front of the app instances, for the provider's webhooks: each
 * delivery goes to a random instance, and to the next one when that one refuses the connection
 * (it was just killed). Without it, the provider's short redelivery schedule (8 attempts over
 * about 50 s, demo/provider.ts) aimed at one URL could outlast a slow restart and drop a
 * refund that a real provider, retrying for days, would deliver: a loss of the simulation, not of
 * idem. Only connection failures move on; an answer, whatever its status, goes back as it is.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export async function startLoadBalancer(
  targets: readonly string[],
): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(req.headers)) {
        if (typeof value === 'string' && (name.startsWith('webhook-') || name === 'content-type'))
          headers[name] = value;
      }
      const order = [...targets].sort(() => Math.random() - 0.5);
      void (async () => {
        for (const target of order) {
          try {
            const response = await fetch(`${target}${req.url ?? '/'}`, {
              method: req.method,
              headers,
              body,
              signal: AbortSignal.timeout(10_000),
            });
            const answer = Buffer.from(await response.arrayBuffer());
            res.writeHead(response.status, {
              'content-type': response.headers.get('content-type') ?? 'text/plain',
            });
            res.end(answer);
            return;
          } catch {
            // down or hung: the next instance
          }
        }
        res.writeHead(502, { 'content-type': 'text/plain' }).end('no instance answered');
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}
