/**
 * `primaryClient` (src/adapters/pg-primary.ts) against the real PostgreSQL of the test run, with
 * stand-ins for the hosts of a high-availability cluster that are not the primary:
 * - read-only: a TCP forwarder to the same server, whose sessions start with
 *   `default_transaction_read_only = on` (the `options` startup parameter), as pg_auto_failover's
 *   promoted node and a demoted one do, and as a standby answers `transaction_read_only`;
 * - down: a free port nobody listens on (the connection is refused at once);
 * - dead: a port that accepts the connection and never answers (a host that drops packets).
 * A real standby (`pg_is_in_recovery()`) is refused in test/ha/failover.test.ts, on a formation.
 * These run wherever the test database runs: pg_auto_failover is not needed.
 */
import { randomBytes } from 'node:crypto';
import { createServer, connect, type Server, type Socket } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg, NoPrimaryError, primaryClient, splitMultiHostUrl } from 'idem/pg';
import { createEvents, createIdem, isRetryable, migrate, sqlStateOf } from 'idem';
import { databaseUrl } from '../support/database.js';
import { freePort } from '../support/ports.js';

const target = new URL(databaseUrl());
const targetHost = target.hostname;
const targetPort = Number(target.port || 5432);

/** Ports whose sessions are read-only; a count of connections after which a port turns read-only. */
const readOnlyPorts = new Set<number>();
const readOnlyAfter = new Map<number, number>();
const connectionsTo = new Map<number, number>();

/**
 * pg.Client, but a session to a "read-only" port starts read-only: the standby stand-in. Decided
 * when the startup message goes out, from the port the client actually connects to.
 */
class StandInClient extends pg.Client {
  getStartupConf(): Record<string, string> {
    const conf = (
      pg.Client.prototype as unknown as { getStartupConf(): Record<string, string> }
    ).getStartupConf.call(this);
    const seen = (connectionsTo.get(this.port) ?? 0) + 1;
    connectionsTo.set(this.port, seen);
    const after = readOnlyAfter.get(this.port);
    if (readOnlyPorts.has(this.port) || (after !== undefined && seen > after)) {
      conf.options = '-c default_transaction_read_only=on';
    }
    return conf;
  }
}

let readOnly: Forwarder;
let flipping: Forwarder;
let dead: { server: Server; port: number; sockets: Set<Socket> };
let downPort: number;
const user = decodeURIComponent(target.username || 'postgres');
const database = target.pathname.slice(1) || 'postgres';
const password = decodeURIComponent(target.password) || undefined;
const base = { user, database, password };
const real = `${targetHost}:${targetPort}`;

beforeAll(async () => {
  readOnly = await startForwarder(targetHost, targetPort);
  readOnlyPorts.add(readOnly.port);
  flipping = await startForwarder(targetHost, targetPort);
  dead = await startDeadHost();
  downPort = await freePort();
});

afterAll(async () => {
  await readOnly?.close();
  await flipping?.close();
  for (const s of dead?.sockets ?? []) s.destroy();
  dead?.sockets.clear();
  await new Promise((resolve) => dead?.server.close(resolve));
});

/** A pool on `primaryClient`; `refused` collects its `primary:refused` events. */
function poolOf(
  hosts: string[],
  extra: Partial<pg.PoolConfig> & { hostTimeoutMillis?: number; preferLastPrimary?: boolean } = {},
) {
  const refused: string[] = [];
  const events = createEvents();
  events.on('primary:refused', (h) =>
    refused.push(`${h.port === targetPort ? 'real' : h.port}: ${h.reason}`),
  );
  const { hostTimeoutMillis, preferLastPrimary, ...config } = extra;
  const pool = new pg.Pool({
    ...base,
    max: 2,
    Client: primaryClient(StandInClient, {
      hosts,
      hostTimeoutMillis,
      preferLastPrimary,
      events,
    }),
    ...config,
  });
  pool.on('error', () => undefined);
  return { pool, refused };
}

async function landedOn(pool: pg.Pool): Promise<{ port: number; readOnly: string }> {
  const client = await pool.connect();
  try {
    const { rows } = await client.query<{ ro: string }>(
      `SELECT current_setting('transaction_read_only') AS ro`,
    );
    return { port: client.port, readOnly: rows[0]!.ro };
  } finally {
    client.release();
  }
}

describe('splitMultiHostUrl', () => {
  it('reads libpq multi-host URLs, with default ports, IPv6, and drops target_session_attrs', () => {
    const { hosts, urlFor } = splitMultiHostUrl(
      'postgres://app:s%40cret@db1:5433,db2,[::1]:6543/shop?sslmode=require&target_session_attrs=read-write',
    );
    expect(hosts).toEqual([
      { host: 'db1', port: 5433 },
      { host: 'db2', port: 5432 },
      { host: '::1', port: 6543 },
    ]);
    expect(urlFor(hosts[2]!)).toBe('postgres://app:s%40cret@[::1]:6543/shop?sslmode=require');
    expect(urlFor(hosts[1]!)).toBe('postgres://app:s%40cret@db2:5432/shop?sslmode=require');
    expect(splitMultiHostUrl('postgresql://h/db?target_session_attrs=primary').hosts).toEqual([
      { host: 'h', port: 5432 },
    ]);
  });

  it('refuses a target_session_attrs that asks for something other than the primary', () => {
    for (const attrs of ['standby', 'read-only', 'prefer-standby', 'any']) {
      expect(() => splitMultiHostUrl(`postgres://h1,h2/db?target_session_attrs=${attrs}`)).toThrow(
        `target_session_attrs=${attrs}`,
      );
    }
    expect(() => splitMultiHostUrl('mysql://h/db')).toThrow('not a postgres:// URL');
  });
});

describe('primaryClient on a real PostgreSQL', () => {
  it('skips a host that is down and one that is read-only, and lands on the writable primary', async () => {
    const { pool, refused } = poolOf([`127.0.0.1:${downPort}`, `127.0.0.1:${readOnly.port}`, real], {
      preferLastPrimary: false,
    });
    try {
      expect(await landedOn(pool)).toEqual({ port: targetPort, readOnly: 'off' });
      expect(refused).toHaveLength(2);
      expect(refused[0]).toMatch(new RegExp(`^${downPort}: ECONNREFUSED`));
      expect(refused[1]).toBe(`${readOnly.port}: read-only (transaction_read_only = on)`);
    } finally {
      await pool.end();
    }
  });

  it('without a writable host the connect fails with NoPrimaryError: SQLSTATE 08001, transient', async () => {
    const { pool } = poolOf([`127.0.0.1:${readOnly.port}`, `127.0.0.1:${downPort}`]);
    try {
      const error = await pool.connect().then(
        (c) => (c.release(), undefined),
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(NoPrimaryError);
      const refusal = error as NoPrimaryError;
      expect(refusal.code).toBe('08001');
      expect(sqlStateOf(refusal)).toBe('08001');
      expect(isRetryable(refusal)).toBe(true);
      expect(refusal.refused.map((r) => r.port)).toEqual([readOnly.port, downPort]);
      expect(refusal.message).toContain('read-only');
      expect(refusal.message).toContain('ECONNREFUSED');
    } finally {
      await pool.end();
    }
  });

  it('gives a host that never answers hostTimeoutMillis, then tries the next', async () => {
    const { pool, refused } = poolOf([`127.0.0.1:${dead.port}`, real], {
      hostTimeoutMillis: 300,
      preferLastPrimary: false,
    });
    try {
      const started = Date.now();
      expect((await landedOn(pool)).port).toBe(targetPort);
      // The dead host had its 300 ms, no less; then the next host was tried (it landed there, and
      // the refusal says timeout). No upper bound: a busy machine only makes it later.
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
      expect(refused).toEqual([expect.stringMatching(new RegExp(`^${dead.port}: .*timeout`, 'i'))]);
    } finally {
      await pool.end();
    }
  });

  it("by default splits the pool's connectionTimeoutMillis between the hosts, so the round fits in it", async () => {
    const { pool, refused } = poolOf([`127.0.0.1:${dead.port}`, `127.0.0.1:${dead.port}`, real], {
      connectionTimeoutMillis: 1500,
      preferLastPrimary: false,
    });
    try {
      // Landing at all shows the round fit: two dead hosts given the whole 1.5 s each would have
      // used up the pool's connect timeout before the real one was tried.
      expect((await landedOn(pool)).port).toBe(targetPort);
      expect(refused).toHaveLength(2);
    } finally {
      await pool.end();
    }
  });

  it("stops when the pool's connect timeout runs out: a transient error, no check connection left open", async () => {
    const before = dead.sockets.size;
    const { pool } = poolOf([`127.0.0.1:${dead.port}`, `127.0.0.1:${dead.port}`], {
      connectionTimeoutMillis: 400,
      hostTimeoutMillis: 5000,
    });
    try {
      const started = Date.now();
      const error = await pool.connect().then(
        (c) => (c.release(), undefined),
        (e: unknown) => e,
      );
      // Before the dead host's own 5 s (which it must not sit out); that the second host was never
      // tried is checked below (one socket).
      expect(Date.now() - started).toBeLessThan(5000);
      expect(error).toBeInstanceOf(Error);
      expect(isRetryable(error)).toBe(true);
      expect((error as Error).cause).toBeInstanceOf(NoPrimaryError);
      // The check connection to the dead host was abandoned, and only one was opened.
      const open = () => [...dead.sockets].filter((s) => !s.destroyed).length;
      await until(() => open() === 0);
      expect(open()).toBe(0);
      expect(dead.sockets.size - before).toBe(1);
    } finally {
      await pool.end();
    }
  });

  it('refuses a host that qualified but whose pooled session is read-only (a failover in between)', async () => {
    readOnlyAfter.set(flipping.port, (connectionsTo.get(flipping.port) ?? 0) + 1); // the check only
    const { pool } = poolOf([`127.0.0.1:${flipping.port}`]);
    try {
      const error = await pool.connect().then(
        (c) => (c.release(), undefined),
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(NoPrimaryError);
      expect((error as Error).message).toContain('after a host qualified');
      expect(isRetryable(error)).toBe(true);
    } finally {
      readOnlyAfter.delete(flipping.port);
      await pool.end();
    }
  });

  it('tries the last primary first (preferLastPrimary), or keeps the order given', async () => {
    const hosts = [`127.0.0.1:${readOnly.port}`, real];
    const remembering = poolOf(hosts, { max: 4 });
    const ordered = poolOf(hosts, { max: 4, preferLastPrimary: false });
    try {
      const hold = async (pool: pg.Pool) => {
        const clients = [];
        for (let i = 0; i < 3; i++) clients.push(await pool.connect());
        for (const c of clients) c.release();
      };
      await hold(remembering.pool);
      expect(remembering.refused).toHaveLength(1); // the first connect only
      await hold(ordered.pool);
      expect(ordered.refused).toHaveLength(3);
    } finally {
      await remembering.pool.end();
      await ordered.pool.end();
    }
  });

  it('reads the hosts from a multi-host connectionString, which node-postgres alone refuses', async () => {
    const url = `postgres://${encodeURIComponent(user)}${password ? `:${encodeURIComponent(password)}` : ''}@127.0.0.1:${downPort},127.0.0.1:${readOnly.port},${real}/${database}?target_session_attrs=read-write`;
    expect(() => new pg.Client({ connectionString: url })).toThrow();
    const pool = new pg.Pool({ connectionString: url, Client: primaryClient(StandInClient), max: 1 });
    pool.on('error', () => undefined);
    try {
      expect(await landedOn(pool)).toEqual({ port: targetPort, readOnly: 'off' });
    } finally {
      await pool.end();
    }
  });

  it('carries idem: keyed operations through it, and a transient, retryable failure when nothing qualifies', async () => {
    const schema = `idem_ha_pf_${randomBytes(4).toString('hex')}`;
    const { pool } = poolOf([`127.0.0.1:${readOnly.port}`, real], { max: 4, connectionTimeoutMillis: 2000 });
    const nowhere = poolOf([`127.0.0.1:${readOnly.port}`, `127.0.0.1:${downPort}`], {
      connectionTimeoutMillis: 2000,
    });
    try {
      await migrate(fromPg(pool), { schema });
      await pool.query(`CREATE TABLE "${schema}".orders (key text PRIMARY KEY, amount int NOT NULL)`);
      const idem = createIdem({ sql: fromPg(pool), schema });
      const spec = { tenant: 'acme', operation: 'create-order', key: 'order-1', request: { amount: 5 } };
      const order = async (tx: { query(text: string, params?: unknown[]): Promise<unknown> }) => {
        await tx.query(`INSERT INTO "${schema}".orders (key, amount) VALUES ($1, $2)`, ['order-1', 5]);
        return { ok: true };
      };
      expect(await idem.run(spec, order)).toMatchObject({ value: { ok: true }, replayed: false });
      expect(await idem.run(spec, order)).toMatchObject({ value: { ok: true }, replayed: true });

      const cut = createIdem({ sql: fromPg(nowhere.pool), schema });
      const failed = await cut.run({ ...spec, key: 'order-2' }, order).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isRetryable(failed)).toBe(true);
      expect(sqlStateOf(failed)).toBe('08001');
      const { rows } = await pool.query(`SELECT idempotency_key FROM "${schema}".requests ORDER BY 1`);
      expect(rows).toEqual([{ idempotency_key: 'order-1' }]); // nothing stored for the failed one
    } finally {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
      await pool.end();
      await nowhere.pool.end();
    }
  });
});

interface Forwarder {
  port: number;
  close(): Promise<void>;
}

/** A TCP forwarder to host:port, so one server can be reached as a second "host". */
async function startForwarder(host: string, port: number): Promise<Forwarder> {
  const sockets = new Set<Socket>();
  const server = createServer((downstream) => {
    const upstream = connect(port, host);
    for (const s of [downstream, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        sockets.delete(s);
        downstream.destroy();
        upstream.destroy();
      });
    }
    downstream.pipe(upstream).pipe(downstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Accepts connections and never answers. */
async function startDeadHost() {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.resume(); // reads (and drops) what arrives, so a client's close is seen
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as { port: number }).port, sockets };
}

async function until(ok: () => boolean, timeoutMs = 3000) {
  const deadline = Date.now() + timeoutMs;
  while (!ok() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
}
