import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { fromPg } from 'idem/pg';
import { createEvents, type IdemEvents, type Queryable, type Sql } from 'idem';
import { createInbox, type Inbox } from 'idem/inbox';
import {
  createOutbox,
  createOutboxDispatcher,
  type Outbox,
  type OutboxEvent,
  type Publisher,
} from 'idem/outbox';
import { createTestSchema, databaseUrl, type TestSchema } from './database.js';
import { consumerCounts } from './events.js';
import { waitFor } from './poll.js';

export { waitFor };

/** A name no other test run uses: queues, streams and subjects are shared by everyone on the broker. */
export function uniqueName(prefix: string): string {
  return `idem-test-${prefix}-${randomBytes(4).toString('hex')}`;
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

/** Event `i` of `topic` as `BrokerBed.addEvents` wrote it (key `k`), for publishing it again by hand. */
export function addedEvent(id: string, topic: string, i = 0): OutboxEvent {
  const payload = { i, key: 'k' };
  return {
    id,
    topic,
    key: 'k',
    type: 'test.event',
    payload,
    headers: {},
    createdAt: Date.now(),
    attempts: 0,
  };
}

/** A broker consumer that can be started and stopped (RabbitMQ's, JetStream's). */
interface Startable {
  start(): Promise<unknown>;
  stop(): Promise<unknown>;
}

/**
 * What the broker suites share, filled in by the `beforeAll` that `brokerBed` registers: a schema
 * with an `effects` table, an outbox and an inbox on it, the inbox's event channel (its consumers
 * report there too), and closers run after each test.
 */
export interface BrokerBed {
  db: TestSchema;
  sql: Sql;
  outbox: Outbox;
  inbox: Inbox;
  readonly events: IdemEvents;
  readonly closers: (() => Promise<unknown>)[];
  /** Adds `count` events of `topic` in one transaction, keyed round-robin by `keys`; their ids. */
  addEvents: (topic: string, count: number, keys?: string[]) => Promise<string[]>;
  /** Drains every event of `topic` through `publisher` once; how many were published. */
  drain: (publisher: Publisher, topic: string) => Promise<number>;
  /**
   * Starts a dispatcher of `topic` for an outage test, stopped after the test: maxAttempts 1, so
   * any counted failure would park an event (an outage must count none), polling every 20 ms.
   */
  startOutageDispatcher: (publisher: Publisher, topic: string, events: IdemEvents) => Promise<void>;
  /** How many events of `topic` are not published yet. */
  pending: (topic: string) => Promise<number>;
  /** The effect a handler applies: one row of `effects` for `messageId`. */
  recordEffect: (tx: Queryable, messageId: string) => Promise<void>;
  /**
   * A handler that notes each attempt in `seen`, fails a message of key `poison` ('cannot apply
   * poison') and applies the effect of any other.
   */
  poisonHandler: (
    seen: { id: string; attempt: number; at: number }[],
  ) => (tx: Queryable, message: { id: string; attempt: number; json<T>(): T }) => Promise<void>;
  /** How many effects each of `ids` has, in their order. */
  effectsPerMessage: (ids: string[]) => Promise<number[]>;
  /** Starts consumer `c` named `name`, stopped after the test, with what it did counted. */
  started: <C extends Startable>(
    name: string,
    c: C,
  ) => Promise<C & { counts: ReturnType<typeof consumerCounts> }>;
  /** A TCP proxy to `url` (its port or `defaultPort`), started, closed after the test. */
  proxyTo: (url: string, defaultPort: number) => Promise<TcpProxy>;
  /** `spawnChild` with this bed's database and schema in the child's environment. */
  spawn: (script: string, env: Record<string, string>) => Child;
}

/**
 * Registers the hooks of a broker suite (call it in the `describe`): the schema, outbox and inbox
 * before all tests, the closers after each, the schema dropped after all. `effectsColumns` are
 * the columns of its `effects` table, `message_id text NOT NULL` first.
 */
export function brokerBed(effectsColumns: string): BrokerBed {
  const events = createEvents();
  events.on('error', () => undefined);
  const closers: (() => Promise<unknown>)[] = [];
  // db, sql, outbox and inbox are set by the beforeAll below, before any test reads them.
  const bed = {
    events,
    closers,
    async addEvents(topic, count, keys = ['k']) {
      const ids: string[] = [];
      await bed.sql.transaction(async (tx) => {
        for (let i = 0; i < count; i++) {
          const key = keys[i % keys.length]!;
          ids.push(await bed.outbox.add(tx, { topic, key, type: 'test.event', payload: { i, key } }));
        }
      });
      return ids;
    },
    async drain(publisher, topic) {
      const { sql, db } = bed;
      return (await createOutboxDispatcher({ sql, publisher, schema: db.schema, topics: [topic] }).drain())
        .published;
    },
    async startOutageDispatcher(publisher, topic, reported) {
      const dispatcher = createOutboxDispatcher({
        sql: bed.sql,
        publisher,
        schema: bed.db.schema,
        topics: [topic],
        maxAttempts: 1,
        pollIntervalMs: 20,
        outageBackoff: { baseMs: 20, maxMs: 100 },
        events: reported,
      });
      await dispatcher.start();
      closers.push(() => dispatcher.stop());
    },
    pending: async (topic) => (await bed.outbox.stats({ topic })).pending,
    async recordEffect(tx, messageId) {
      await tx.query(`INSERT INTO "${bed.db.schema}".effects (message_id) VALUES ($1)`, [messageId]);
    },
    poisonHandler: (seen) => async (tx, message) => {
      seen.push({ id: message.id, attempt: message.attempt, at: Date.now() });
      if (message.json<{ key: string }>().key === 'poison') throw new Error('cannot apply poison');
      await bed.recordEffect(tx, message.id);
    },
    async effectsPerMessage(ids) {
      const { rows } = await bed.sql.query<{ message_id: string; n: number }>(
        `SELECT message_id, count(*)::int AS n FROM "${bed.db.schema}".effects WHERE message_id = ANY($1) GROUP BY message_id`,
        [ids],
      );
      const byId = new Map(rows.map((r) => [r.message_id, Number(r.n)]));
      return ids.map((id) => byId.get(id) ?? 0);
    },
    async started(name, c) {
      const counts = consumerCounts(events, name, closers);
      await c.start();
      closers.push(() => c.stop());
      return Object.assign(c, { counts });
    },
    async proxyTo(url, defaultPort) {
      const target = new URL(url);
      const proxy = new TcpProxy(target.hostname, Number(target.port || defaultPort));
      await proxy.start();
      closers.push(() => proxy.close());
      return proxy;
    },
    spawn: (script, env) =>
      spawnChild(script, { DATABASE_URL: databaseUrl(), SCHEMA: bed.db.schema, ...env }),
  } as BrokerBed;
  beforeAll(async () => {
    bed.db = await createTestSchema({ poolSize: 8 });
    bed.sql = fromPg(bed.db.pool);
    bed.outbox = createOutbox({ sql: bed.sql, schema: bed.db.schema });
    bed.inbox = createInbox({ sql: bed.sql, schema: bed.db.schema, events });
    await bed.sql.query(`CREATE TABLE "${bed.db.schema}".effects (${effectsColumns})`);
  });
  afterEach(async () => {
    for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
  });
  afterAll(() => bed.db?.close());
  return bed;
}
