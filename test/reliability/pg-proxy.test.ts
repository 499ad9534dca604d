/**
 * The fault proxy itself (test/support/faults/pg-proxy.ts), against the real PostgreSQL: each fault does what
 * it says, seen from node-postgres and postgres.js, so the end-to-end fault tests can trust it.
 * Among them: node-postgres sends COMMIT as a simple query (`Q`) in pipeline mode too, in the
 * same TCP chunk as idem's last statement, and postgres.js as a Parse (extended protocol).
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { fromPostgresJs } from 'idem/postgres';
import { createIdem, type Idem } from 'idem';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { createEffects, effectsOf } from '../support/faults/effects.js';
import { startPgProxyTo, type PgProxy } from '../support/faults/pg-proxy.js';

let db: TestSchema;
let proxy: PgProxy;
let proxied: string;

beforeAll(async () => {
  db = await createTestSchema();
  await createEffects(db.pool, db.schema);
  proxy = await startPgProxyTo(databaseUrl());
  proxied = proxy.url(databaseUrl());
});
afterAll(async () => {
  await proxy.close();
  await db.close();
});

const errorOf = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e as Error & { code?: string },
  );
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function client(options: Partial<pg.ClientConfig> = {}) {
  const c = new pg.Client({ connectionString: proxied, ...options });
  c.on('error', () => undefined);
  await c.connect();
  return c;
}

/** The backend behind a proxied connection, seen from a direct one. */
async function backendsOn(ports: number[]) {
  const { rows } = await db.pool.query<{ pid: number; state: string }>(
    'SELECT pid, state FROM pg_stat_activity WHERE client_port = ANY($1)',
    [ports],
  );
  return rows;
}

describe('COMMIT on the wire', () => {
  /** Runs `fn` with idem on a node-postgres pool through the proxy (pipeline mode or not), ended after. */
  async function onNodePostgres(pipeline: boolean, fn: (idem: Idem) => Promise<void>): Promise<void> {
    const pool = new pg.Pool({ connectionString: proxied, max: 2, pipeline });
    pool.on('error', () => undefined);
    try {
      await fn(createIdem({ sql: fromPg(pool), schema: db.schema }));
    } finally {
      await pool.end();
    }
  }

  it.each([true, false])(
    'node-postgres (pipeline %s) sends COMMIT as a simple query; pipelined, in one chunk with idem’s record',
    async (pipeline) => {
      await onNodePostgres(pipeline, async (idem) => {
        proxy.resetStats();
        const key = `wire-${randomUUID()}`;
        await idem.run({ tenant: 'acme', operation: 'wire', key, request: {} }, async (tx) => {
          await tx.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, 1)`, [key]);
          return { ok: true };
        });
        const stats = proxy.stats();
        expect(stats.commits).toBe(1);
        expect(stats.commitsSimple).toBe(1);
        expect(stats.commitsExtended).toBe(0);
        expect(stats.commitsInSharedChunk).toBe(pipeline ? 1 : 0);
      });
    },
  );

  /** Runs `operation` once with its COMMIT's answer lost on the way back: its key, and the run to retry. */
  async function loseCommitAnswer(idem: Idem, operation: string) {
    proxy.resetStats();
    const key = `${operation}-${randomUUID()}`;
    const run = () =>
      idem.run({ tenant: 'acme', operation, key, request: {} }, async (tx) => {
        await tx.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, 1)`, [key]);
        return { ok: true };
      });
    const cut = proxy.cutNextCommit('lose-answer');
    await errorOf(run());
    await cut;
    return { key, run };
  }

  it.each([true, false])(
    'pipeline %s: a lost COMMIT answer (in a shared chunk when pipelined): the client is cut, PostgreSQL committed',
    async (pipeline) => {
      await onNodePostgres(pipeline, async (idem) => {
        // idem may resolve the unknown outcome itself (it reads the key) or hand a retryable error back.
        const { key, run } = await loseCommitAnswer(idem, 'lost');
        expect(proxy.stats()).toMatchObject({ commitsLost: 1, commitsLostRolledBack: 0 });
        if (pipeline) expect(proxy.stats().commitsInSharedChunk).toBeGreaterThanOrEqual(1);
        else expect(proxy.stats().commitsInSharedChunk).toBe(0);
        expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
        expect(await run()).toMatchObject({ replayed: true });
      });
    },
  );

  it('postgres.js sends COMMIT as a Parse; its answer can be lost too', async () => {
    const sql = postgres(proxied, { max: 2, onnotice: () => undefined });
    try {
      const idem = createIdem({ sql: fromPostgresJs(sql), schema: db.schema });
      const { key, run } = await loseCommitAnswer(idem, 'pgjs');
      const stats = proxy.stats();
      // idem may have committed a second attempt (it reads the key after an unknown outcome).
      expect(stats.commitsExtended).toBeGreaterThanOrEqual(1);
      expect(stats.commitsSimple).toBe(0);
      expect(stats.commitsLost).toBe(1);
      expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
      expect(await run()).toMatchObject({ replayed: true });
    } finally {
      await sql.end({ timeout: 1 });
    }
  });
});

describe('connection faults', () => {
  it('loseCommitAcks: each COMMIT loses its answer with the probability given; the client sees a lost connection', async () => {
    const c = await client();
    const key = `acks-${randomUUID()}`;
    proxy.resetStats();
    proxy.loseCommitAcks(1);
    await c.query('BEGIN');
    await c.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, 1)`, [key]);
    const error = await errorOf(c.query('COMMIT'));
    proxy.loseCommitAcks(0);
    expect(error?.message).toMatch(/Connection terminated/);
    expect(proxy.stats()).toMatchObject({ commits: 1, commitsLost: 1 });
    expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
  });

  it('random resets: live connections are reset at about the rate asked', async () => {
    const clients = await Promise.all(Array.from({ length: 4 }, () => client()));
    proxy.resetStats();
    proxy.randomResets(20);
    await sleep(1000);
    proxy.randomResets(0);
    const { resets } = proxy.stats();
    expect(resets).toBeGreaterThan(0);
    expect(resets).toBeLessThanOrEqual(4);
    const errors = await Promise.all(clients.map((c) => errorOf(c.query('SELECT 1'))));
    const failed = errors.filter(Boolean).length;
    expect(failed).toBeGreaterThan(0);
    expect(failed).toBeLessThanOrEqual(resets);
    await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
  });

  it('latency: each chunk each way is delayed 50–300 ms, in order', async () => {
    // Pipelined: twenty queries in flight at once, in as many chunks, whose answers must keep their order.
    const c = await client({ pipeline: true });
    try {
      proxy.latency({ minMs: 50, maxMs: 300 });
      const started = Date.now();
      const answers = await Promise.all(
        Array.from({ length: 20 }, (_, i) => c.query<{ i: number }>('SELECT $1::int AS i', [i])),
      );
      const elapsed = Date.now() - started;
      expect(answers.map((a) => a.rows[0]!.i)).toEqual(Array.from({ length: 20 }, (_, i) => i));
      // At least 50 ms each way.
      expect(elapsed).toBeGreaterThanOrEqual(100);
      const one = Date.now();
      await c.query('SELECT 1');
      console.log(
        `[pg-proxy] 50–300 ms latency: 20 pipelined queries ${elapsed} ms, one round trip ${Date.now() - one} ms`,
      );
    } finally {
      proxy.latency(null);
      await c.end();
    }
  });

  it('a silent partition: nothing crosses, no close either; heal delivers the data, then the closes', async () => {
    const before = new Set(proxy.backendPorts());
    const a = await client();
    const aPort = proxy.backendPorts().find((p) => !before.has(p))!;
    const b = await client();
    const bPort = proxy.backendPorts().find((p) => !before.has(p) && p !== aPort)!;
    const partition = proxy.partition();
    let answered = false;
    const query = a.query('SELECT 42 AS n').then((r) => {
      answered = true;
      return r;
    });
    // A connection opened during the partition does not reach PostgreSQL.
    const late = new pg.Client({ connectionString: proxied, connectionTimeoutMillis: 300 });
    late.on('error', () => undefined);
    expect((await errorOf(late.connect()))?.message).toMatch(/timeout/i);
    // b closes during the partition: its backend does not see it.
    await b.end().catch(() => undefined);
    await sleep(300);
    expect(answered).toBe(false);
    expect((await backendsOn([aPort, bPort])).length).toBe(2);
    partition.heal();
    expect((await query).rows).toEqual([{ n: 42 }]);
    // The held close reached PostgreSQL at the heal.
    for (let i = 0; i < 50 && (await backendsOn([bPort])).length > 0; i++) await sleep(100);
    expect(await backendsOn([bPort])).toEqual([]);
    await a.end();
  });

  it('a failover: live connections reset; new ones unanswered during the window (and after), normal after it', async () => {
    const a = await client();
    const failover = proxy.failover({ unansweredMs: 600 });
    expect(await errorOf(a.query('SELECT 1'))).toBeDefined();
    const during = new pg.Client({ connectionString: proxied, connectionTimeoutMillis: 1500 });
    during.on('error', () => undefined);
    const duringConnect = errorOf(during.connect());
    await failover;
    // Still silent after the window ends.
    expect((await duringConnect)?.message).toMatch(/timeout/i);
    const after = await client();
    expect((await after.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    await after.end();
    expect(proxy.stats().unanswered).toBeGreaterThanOrEqual(1);
  });

  it('53300: new connections refused as PostgreSQL refuses them, while on, or for a count', async () => {
    proxy.refuse(true);
    const first = await errorOf(client());
    const second = await errorOf(client());
    proxy.refuse(false);
    for (const error of [first, second]) {
      expect(error).toMatchObject({ code: '53300', severity: 'FATAL' });
      expect(error?.message).toBe('sorry, too many clients already');
    }
    proxy.refuse({ count: 1 });
    expect(await errorOf(client())).toMatchObject({ code: '53300' });
    const fine = await client();
    await fine.end();
  });

  it('read-only: writes fail with 25006 on the connections made read-only; the window resets them at its end', async () => {
    const before = await client();
    const window = proxy.readOnlyWindow({ ms: 400 });
    expect(await errorOf(before.query('SELECT 1'))).toBeDefined();
    const during = await client();
    expect((await during.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    expect(
      await errorOf(during.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ('ro', 1)`)),
    ).toMatchObject({ code: '25006' });
    await window;
    expect(await errorOf(during.query('SELECT 1'))).toBeDefined();
    const after = await client();
    await after.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ('rw', 1)`);
    await after.end();
  });

  it.each(['in a transaction', 'in autocommit'])(
    'onStatement read-only %s: that statement gets a real 25006, the connection stays usable and writable',
    async (where) => {
      const c = await client();
      try {
        const key = `hook-${randomUUID()}`;
        const fired = proxy.onStatement(/INSERT INTO .*effects/, 'read-only');
        if (where === 'in a transaction') await c.query('BEGIN');
        const error = await errorOf(
          c.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, 1)`, [key]),
        );
        await fired;
        expect(error).toMatchObject({ code: '25006' });
        if (where === 'in a transaction') await c.query('ROLLBACK');
        await c.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, 2)`, [key]);
        expect((await c.query<{ ro: string }>('SHOW transaction_read_only')).rows[0]).toEqual({
          transaction_read_only: 'off',
        });
        expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
      } finally {
        await c.end();
      }
    },
  );

  it('onStatement reset: the statement never reaches PostgreSQL', async () => {
    const c = await client();
    const key = `reset-${randomUUID()}`;
    const fired = proxy.onStatement(/INSERT INTO .*effects/, 'reset');
    expect(
      await errorOf(c.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, 1)`, [key])),
    ).toBeDefined();
    await fired;
    expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(0);
  });
});
