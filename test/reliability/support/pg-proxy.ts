/**
 * A TCP proxy between node-postgres and PostgreSQL that understands just enough of the wire
 * protocol to find a `COMMIT` (a simple-query message) and cut the connection around it:
 * - `lose-answer`: forward COMMIT, wait until PostgreSQL has answered (so it did commit), then
 *   drop the answer and close the client's side. The client cannot know the outcome.
 * - `drop-commit`: never forward COMMIT and close both sides. PostgreSQL sees the connection end
 *   inside the transaction and rolls back. The client sees the same error as above.
 * Closing is a FIN (`end`), as when a server process dies or a middlebox closes the connection;
 * pass `reset: true` for an RST.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export type CutMode = 'lose-answer' | 'drop-commit';

export interface PgProxy {
  port: number;
  /** `connectionString` with the host and port replaced by the proxy's. */
  url(connectionString: string): string;
  /** Cuts the next COMMIT on any connection; resolves once the cut happened. */
  cutNextCommit(mode: CutMode, options?: { reset?: boolean }): Promise<void>;
  close(): Promise<void>;
}

const sslRequest = 80877103;
const gssRequest = 80877104;

export async function startPgProxy(target: { host: string; port: number }): Promise<PgProxy> {
  let armed: { mode: CutMode; reset: boolean; done: () => void } | undefined;
  const sockets = new Set<Socket>();

  const server: Server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    sockets.add(client).add(upstream);
    client.on('close', () => sockets.delete(client));
    upstream.on('close', () => sockets.delete(upstream));
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('end', () => upstream.end());
    upstream.on('end', () => client.end());

    let swallow: (() => void) | undefined;
    upstream.on('data', (chunk: Buffer) => {
      if (swallow) swallow();
      else client.write(chunk);
    });

    let pending = Buffer.alloc(0);
    let untyped = true; // the startup packet (and SSL/GSS requests) carry no type byte
    const close = (socket: Socket, reset: boolean) => (reset ? socket.resetAndDestroy() : socket.end());
    client.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        if (untyped) {
          if (pending.length < 8) return;
          const length = pending.readInt32BE(0);
          if (pending.length < length) return;
          const code = pending.readInt32BE(4);
          upstream.write(pending.subarray(0, length));
          pending = pending.subarray(length);
          untyped = code === sslRequest || code === gssRequest;
          continue;
        }
        if (pending.length < 5) return;
        const total = 1 + pending.readInt32BE(1);
        if (pending.length < total) return;
        const message = pending.subarray(0, total);
        pending = pending.subarray(total);
        const cut = armed;
        if (cut && message[0] === 0x51 /* Q */ && isCommit(message)) {
          armed = undefined;
          if (cut.mode === 'drop-commit') {
            close(client, cut.reset);
            upstream.destroy();
            cut.done();
            return;
          }
          // lose-answer: let PostgreSQL commit, then drop whatever it answers and hang up.
          swallow = () => {
            swallow = () => undefined;
            close(client, cut.reset);
            upstream.end();
            cut.done();
          };
          upstream.write(message);
          continue;
        }
        upstream.write(message);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;

  return {
    port,
    url(connectionString) {
      const url = new URL(connectionString);
      url.hostname = '127.0.0.1';
      url.port = String(port);
      return url.toString();
    },
    cutNextCommit(mode, options = {}) {
      return new Promise((resolve) => {
        armed = { mode, reset: options.reset ?? false, done: resolve };
      });
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function isCommit(message: Buffer): boolean {
  const text = message.subarray(5, message.length - 1).toString('utf8');
  return /^\s*(COMMIT|END)\s*;?\s*$/i.test(text);
}
