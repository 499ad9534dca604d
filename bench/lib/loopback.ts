/** A bench's HTTP server on an ephemeral loopback port: its `/charges` URL, and a close that drops idle connections. */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export async function listenOnLoopback(server: Server): Promise<{ url: string; close(): Promise<void> }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/charges`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
