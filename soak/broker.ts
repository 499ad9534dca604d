/**
 * The broker under the soak, and how it is restarted.
 * - RabbitMQ: the machine's server, restarted with `rabbitmqctl stop_app` / `start_app` (the Erlang
 *   node stays up; every connection drops, unacked deliveries return to their queues). `start_app`
 *   always runs again in `close`, so a failing soak never leaves the broker stopped.
 * - NATS: a nats-server of the soak's own (own port, own JetStream store under the run's folder),
 *   killed with SIGKILL and started again on the same store. Its own, because a soak may only end
 *   processes it started, and other test files use the machine's server at the same time.
 * - in-database: no broker; nothing to restart.
 */
import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Child } from './child.js';
import { sleep } from './random.js';
import type { TransportName } from './options.js';
import { freePort } from './ports.js';

const run = promisify(execFile);

export interface Broker {
  name: TransportName;
  /** Environment for the app instances (AMQP_URL or NATS_URL). */
  env: Record<string, string>;
  /** Whether `restart` does anything. */
  restartable: boolean;
  start(): Promise<void>;
  /** Takes the broker down for `downMs` and brings it back; resolves once it accepts connections. */
  restart(downMs: number): Promise<void>;
  /** Deletes what the run declared (queues, exchanges, streams). */
  cleanup(namespace: string): Promise<void>;
  /** Leaves the broker running (RabbitMQ) or stops the soak's own (NATS). Never throws. */
  close(): Promise<void>;
}

export function createBroker(name: TransportName, runDir: string): Broker {
  if (name === 'rabbitmq') return rabbitMq(process.env.AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672');
  if (name === 'nats') return ownNats(runDir);
  return {
    name,
    env: {},
    restartable: false,
    start: async () => {},
    restart: async () => {},
    cleanup: async () => {},
    close: async () => {},
  };
}

function rabbitMq(url: string): Broker {
  let stopped = false;
  const ctl = (command: string) => run('rabbitmqctl', ['-q', command], { timeout: 120_000 });
  const reachable = async () => {
    const amqp = await import('amqplib');
    const connection = await amqp.connect(url);
    await connection.close();
  };
  return {
    name: 'rabbitmq',
    env: { AMQP_URL: url },
    restartable: true,
    start: reachable,
    async restart(downMs) {
      stopped = true;
      await ctl('stop_app');
      await sleep(downMs);
      await ctl('start_app');
      stopped = false;
      await waitUntil(reachable, 60_000, 'RabbitMQ after start_app');
    },
    async cleanup(namespace) {
      const amqp = await import('amqplib');
      const connection = await amqp.connect(url);
      const channel = await connection.createChannel();
      const queue = `${namespace}.ledger`;
      for (const name of [
        queue,
        `${queue}.dead`,
        `${queue}.retry.200`,
        `${queue}.retry.1000`,
        `${queue}.retry.5000`,
      ]) {
        await channel.deleteQueue(name);
      }
      await channel.deleteExchange(`${namespace}.payments`);
      await connection.close();
    },
    async close() {
      // Whatever happened, the machine's broker is left running.
      if (!stopped) return;
      await ctl('start_app').catch((error: unknown) => console.error('rabbitmqctl start_app failed:', error));
      stopped = false;
    },
  };
}

function ownNats(runDir: string): Broker {
  const bin = process.env.NATS_SERVER_BIN || '/usr/sbin/nats-server';
  const storeDir = join(runDir, 'nats');
  mkdirSync(storeDir, { recursive: true });
  let port = 0;
  let server: Child | undefined;
  const env: Record<string, string> = {};
  const launch = async () => {
    server = new Child({
      name: 'nats-server',
      command: bin,
      args: ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', storeDir],
      env: process.env,
      logFile: join(runDir, 'nats-server.log'),
    });
    await waitUntil(() => tcpOpen(port), 30_000, 'nats-server');
    // JetStream answers a little after the port opens.
    await server.waitForLine(/Server is ready/, 30_000);
  };
  return {
    name: 'nats',
    env,
    restartable: true,
    async start() {
      port = await freePort();
      env.NATS_URL = `nats://127.0.0.1:${port}`;
      await launch();
    },
    async restart(downMs) {
      await server?.kill9();
      await sleep(downMs);
      await launch();
    },
    cleanup: async () => {}, // the store lives in the run's folder
    async close() {
      await server?.stop(5000).catch(() => undefined);
    },
  };
}

function tcpOpen(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve();
    });
    socket.once('error', reject);
  });
}

/** Retries `probe` until it resolves, every 250 ms, for at most `timeoutMs`. */
export async function waitUntil(
  probe: () => Promise<unknown>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await probe();
      return;
    } catch (error) {
      if (Date.now() > deadline)
        throw new Error(`${what} not reachable within ${timeoutMs} ms`, { cause: error });
      await sleep(250);
    }
  }
}
