import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

/** A name no other test run uses: queues, streams and subjects are shared by everyone on the broker. */
export function uniqueName(prefix: string): string {
  return `idem-test-${prefix}-${randomBytes(4).toString('hex')}`;
}

export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/**
 * A TCP proxy on 127.0.0.1 in front of a broker. `cut()` drops every connection and refuses new
 * ones (the broker "goes away" for this client only); `restore()` accepts again on the same port.
 */
export class TcpProxy {
  private server: net.Server | undefined;
  private readonly sockets = new Set<net.Socket>();
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<void> {
    await this.listen(0);
  }

  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  }

  restore(): Promise<void> {
    return this.listen(this.port);
  }

  close(): Promise<void> {
    return this.cut();
  }

  private listen(port: number): Promise<void> {
    const server = net.createServer((client) => {
      const upstream = net.connect(this.targetPort, this.targetHost);
      this.sockets.add(client);
      this.sockets.add(upstream);
      const drop = () => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(client);
        this.sockets.delete(upstream);
      };
      client.on('error', drop).on('close', drop);
      upstream.on('error', drop).on('close', drop);
      client.pipe(upstream);
      upstream.pipe(client);
    });
    this.server = server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        this.port = (server.address() as net.AddressInfo).port;
        resolve();
      });
    });
  }
}

/** A child process running a TypeScript file with tsx, as a separate OS process we can SIGKILL. */
export interface Child {
  process: ChildProcess;
  output: string[];
  /** Resolves with the exit code and signal. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves when the child printed a line containing `text`. */
  waitForLine(text: string, timeoutMs?: number): Promise<void>;
}

export function spawnChild(script: string, env: Record<string, string>): Child {
  const path = fileURLToPath(new URL(`../messaging/children/${script}`, import.meta.url));
  // A name for the child's PostgreSQL sessions (node-postgres reads PGAPPNAME), so that `exited`
  // can wait until the server has closed them: a SIGKILLed child's backend holds its row locks
  // until PostgreSQL notices the dead socket, and on a loaded machine a dispatcher started at once
  // would skip those rows (SKIP LOCKED) and publish nothing.
  const appName = `idem-test-child-${randomBytes(4).toString('hex')}`;
  const child = spawn(process.execPath, ['--import', 'tsx', path], {
    env: { ...process.env, PGAPPNAME: appName, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  const waiters: { text: string; resolve: () => void }[] = [];
  const onData = (chunk: Buffer) => {
    for (const line of chunk.toString('utf8').split('\n')) {
      if (!line.trim()) continue;
      output.push(line);
      for (const w of waiters.filter((w) => line.includes(w.text))) w.resolve();
    }
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  ).then(async (status) => {
    if (env.DATABASE_URL) await sessionsClosed(env.DATABASE_URL, appName);
    return status;
  });
  return {
    process: child,
    output,
    exited,
    waitForLine(text, timeoutMs = 30_000) {
      if (output.some((line) => line.includes(text))) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`child ${script} did not print "${text}"; output:\n${output.join('\n')}`)),
          timeoutMs,
        );
        waiters.push({
          text,
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        });
        void exited.then(() => {
          if (!output.some((line) => line.includes(text))) {
            clearTimeout(timer);
            reject(
              new Error(`child ${script} exited before printing "${text}"; output:\n${output.join('\n')}`),
            );
          }
        });
      });
    },
  };
}

/** Waits (up to 10 s) until PostgreSQL has no session left named `appName`. */
async function sessionsClosed(url: string, appName: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (let waited = 0; waited < 10_000; waited += 25) {
      const { rows } = await client.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1',
        [appName],
      );
      if (rows[0]!.n === 0) return;
      await sleep(25);
    }
  } finally {
    await client.end();
  }
}
