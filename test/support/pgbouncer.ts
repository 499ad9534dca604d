/**
 * A PgBouncer of the test's own, in front of the test database: writes a config and an auth file in
 * a temporary directory, spawns `pgbouncer` on a free port, waits until it accepts connections, and
 * kills it on `stop` (or when this process exits). Nothing system-wide is used or changed.
 *
 * PgBouncer refuses to run as root; as root it is started with `-u postgres` (or `nobody`), so the
 * directory and files are made readable by that user, and it logs to stderr, never to a file.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { findExecutable } from './executables.js';
import { notInstalled } from './services.js';
import { connect } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import { freePort } from './ports.js';

export interface PgBouncerOptions {
  /** The PostgreSQL PgBouncer forwards to (host, port, user and password are taken from it). */
  targetUrl: string;
  /** Default `transaction`, what managed poolers run. */
  poolMode?: 'transaction' | 'session';
  /** Server connections per database and user. Default 10. */
  poolSize?: number;
}

export interface PgBouncer {
  /** `targetUrl` with its host and port replaced by PgBouncer's. */
  url: string;
  port: number;
  /** Everything PgBouncer wrote to stderr so far (its log). */
  log(): string;
  stop(): Promise<void>;
}

/**
 * Where `pgbouncer` is, or undefined. `PGBOUNCER` names the binary (and only it is tried); otherwise
 * PATH, then /usr/sbin where Debian installs it.
 */
export function findPgBouncer(): string | undefined {
  return findExecutable('pgbouncer', process.env.PGBOUNCER, [
    '/usr/sbin/pgbouncer',
    '/usr/local/sbin/pgbouncer',
    '/usr/local/bin/pgbouncer',
  ]);
}

/**
 * The PgBouncer binary, or undefined with a loud line. Under CI=true a missing PgBouncer is an
 * error: the pooler tests may not pass by skipping.
 */
export function requirePgBouncer(): string | undefined {
  return (
    findPgBouncer() ??
    notInstalled(
      'pgbouncer',
      'the tests through PgBouncer',
      'install it (apt-get install pgbouncer) or set PGBOUNCER to its path',
    )
  );
}

export async function startPgBouncer(binary: string, options: PgBouncerOptions): Promise<PgBouncer> {
  const target = new URL(options.targetUrl);
  const dir = mkdtempSync(path.join(tmpdir(), 'idem-pgbouncer-'));
  // Readable by the unprivileged user PgBouncer switches to when started as root.
  chmodSync(dir, 0o755);
  const user = decodeURIComponent(target.username || userInfo().username);
  const password = decodeURIComponent(target.password);
  const quote = (s: string) => `"${s.replace(/"/g, '""')}"`;
  writeFileSync(path.join(dir, 'userlist.txt'), `${quote(user)} ${quote(password)}\n`, { mode: 0o644 });
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const config = [
      '[databases]',
      `* = host=${target.hostname} port=${target.port || 5432}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      // Clients are not authenticated (loopback only); PgBouncer logs in to the server with the
      // password from the auth file.
      'auth_type = trust',
      `auth_file = ${path.join(dir, 'userlist.txt')}`,
      `pool_mode = ${options.poolMode ?? 'transaction'}`,
      `default_pool_size = ${options.poolSize ?? 10}`,
      'max_client_conn = 1000',
      // node-postgres sends no extra startup parameters; postgres.js sends this one.
      'ignore_startup_parameters = extra_float_digits',
      '',
    ].join('\n');
    const configFile = path.join(dir, 'pgbouncer.ini');
    writeFileSync(configFile, config, { mode: 0o644 });
    const args = process.getuid?.() === 0 ? ['-u', unprivilegedUser(), configFile] : [configFile];
    const child = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => (log += chunk));
    const kill = () => child.kill('SIGKILL');
    process.once('exit', kill);
    try {
      await waitForPort(port, child, () => log);
    } catch (error) {
      lastError = error;
      child.kill('SIGKILL');
      process.off('exit', kill);
      continue; // the port was taken between the probe and PgBouncer's bind: try another
    }
    const url = new URL(options.targetUrl);
    url.hostname = '127.0.0.1';
    url.port = String(port);
    return {
      url: url.toString(),
      port,
      log: () => log,
      async stop() {
        process.off('exit', kill);
        await stopChild(child);
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  rmSync(dir, { recursive: true, force: true });
  throw lastError;
}

function unprivilegedUser(): string {
  try {
    execFileSync('id', ['postgres'], { stdio: 'ignore' });
    return 'postgres';
  } catch {
    return 'nobody';
  }
}

async function waitForPort(port: number, child: ChildProcess, log: () => string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`pgbouncer exited (${child.exitCode ?? child.signalCode}):\n${log()}`);
    }
    // The log line, not just an open port: another process may have taken the probed port.
    if (log().includes(`listening on 127.0.0.1:${port}`) && (await canConnect(port))) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`pgbouncer did not listen on ${port} within 10 s:\n${log()}`);
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1' });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    // SIGTERM: PgBouncer's immediate shutdown (SIGINT would wait for clients to finish).
    child.kill('SIGTERM');
  });
}
