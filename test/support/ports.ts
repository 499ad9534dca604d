/** Ports for servers a test starts itself (a fake provider, a proxy, a PgBouncer, a formation's nodes). */
import { createServer } from 'node:net';

/** A TCP port on `host` that nothing listened on a moment ago (the kernel picked it). */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
