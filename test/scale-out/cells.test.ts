/**
 * Cells on two real PostgreSQL servers: the machine's (DATABASE_URL, cell `a`) and an embedded one
 * started here (cell `b`, its data under .idem/ in the working tree). Tenants of both pay
 * concurrently (keyed operations that write the payment, an outbox event and a receipt task in
 * one transaction, each request sent twice), each cell runs its own dispatcher into its own inbox
 * (the ledger) and its own claims worker; cell `b`'s server is stopped and started again mid-run.
 * Then: every payment exists once, is credited once and has one receipt; nothing is left pending;
 * cell `a` never saw an error during `b`'s outage; and each cell's database holds only its own
 * tenants' rows. The console reads either cell with `?cell=`.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Fastify from 'fastify';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { type Cells, createCells } from 'idem/cells';
import { createClaimsWorker } from 'idem/claims';
import { consolePlugin } from 'idem/console';
import { createEvents, type IdemEvents, isIdemError, quoteSchema } from 'idem';
import { type EmbeddedDatabase, startEmbeddedPostgres } from '../support/embedded.js';
import { createInbox } from 'idem/inbox';
import { createInDatabasePublisher, createOutboxDispatcher, type OutboxDispatcher } from 'idem/outbox';
import { databaseUrl } from '../support/database.js';

const tenantsOf = { a: ['acme', 'apex'], b: ['bolt', 'brio'] } as const;
const paymentsPerTenant = 30;
const schema = `idem_cells_${randomBytes(4).toString('hex')}`;
const s = quoteSchema(schema);
const dir = resolve(`.idem/cells-test-${randomBytes(4).toString('hex')}`);

let embedded: EmbeddedDatabase;
let port: number;
let poolA: pg.Pool;
let poolB: pg.Pool;
let cells: Cells<pg.PoolClient>;

async function startCellB(): Promise<void> {
  embedded = await startEmbeddedPostgres({ dir, persistent: true, ...(port ? { port } : {}) });
  port = embedded.port;
}

beforeAll(async () => {
  await startCellB();
  poolA = new pg.Pool({ connectionString: databaseUrl(), max: 8 });
  poolB = new pg.Pool({ connectionString: embedded.url, max: 8, connectionTimeoutMillis: 2000 });
  // A restarted server ends idle connections: the pool reports it, and replaces them on demand.
  poolA.on('error', () => {});
  poolB.on('error', () => {});
  cells = createCells({
    cells: { a: fromPg(poolA), b: fromPg(poolB) },
    cellOf: (tenant) =>
      (tenantsOf.a as readonly string[]).includes(tenant)
        ? 'a'
        : (tenantsOf.b as readonly string[]).includes(tenant)
          ? 'b'
          : 'nowhere',
    schema,
    // A task claimed when its cell's server went down is taken over once its lease lapses.
    claims: { leaseMs: 2000 },
  });
  await cells.migrate();
  for (const pool of [poolA, poolB]) {
    await pool.query(`
      CREATE TABLE ${s}.payments (tenant_id text, id text, amount int, PRIMARY KEY (tenant_id, id));
      -- No unique constraints below: a second credit or receipt would show, not fail.
      CREATE TABLE ${s}.credits (tenant_id text, payment_id text, event_id uuid);
      CREATE TABLE ${s}.receipts (tenant_id text, payment_id text);`);
  }
}, 180_000);

afterAll(async () => {
  await poolA?.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
  await poolA?.end();
  await poolB?.end();
  await embedded?.stop({ waitForSessionsMs: 0 });
  // The data may live outside `dir` (where the `postgres` user can reach it, when run as root).
  if (embedded) rmSync(embedded.dataDir, { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
});

/** A payment: the row, its event and its receipt task, once per key, in the tenant's cell. */
function pay(tenant: string, n: number) {
  const { idem, outbox, claims } = cells.forTenant(tenant);
  return idem.run({ tenant, operation: 'pay', key: `pay-${n}`, request: { amount: n } }, async (tx) => {
    await tx.query(`INSERT INTO ${s}.payments (tenant_id, id, amount) VALUES ($1, $2, $3)`, [
      tenant,
      `p-${n}`,
      n,
    ]);
    await outbox.add(tx, {
      topic: 'payments',
      key: `p-${n}`,
      type: 'payment.created',
      payload: { payment: `p-${n}`, amount: n },
    });
    await claims.enqueueIn(tx, { tenant, queue: 'receipts', key: `p-${n}`, payload: { payment: `p-${n}` } });
    return { payment: `p-${n}`, amount: n };
  });
}

describe('cells: one idem per group of tenants, each on its own PostgreSQL', () => {
  it('routes tenants to their cells; an unknown cell writes nothing anywhere', () => {
    expect(cells.names).toEqual(['a', 'b']);
    expect(cells.cellOf('acme')).toBe('a');
    expect(cells.forTenant('brio').cell.name).toBe('b');
    expect(cells.forTenant('brio').outbox.tenant).toBe('brio');
    expect(() => cells.forTenant('stranger')).toThrow(/named no cell/);
    try {
      cells.forTenant('stranger');
    } catch (error) {
      expect(isIdemError(error) && error.code).toBe('IDEM_INVALID_ARGUMENT');
    }
    expect(() => createCells({ cells: {}, cellOf: () => 'a' })).toThrow(/at least one cell/);
  });

  it('pays on both cells through a restart of one: nothing lost, nothing twice, no cross-cell rows', async () => {
    const stop = new AbortController();
    // What each cell's workers ran into: cell b's outage must show in b's, never in a's.
    const workerErrors: Record<'a' | 'b', unknown[]> = { a: [], b: [] };
    const cellEvents: Record<'a' | 'b', IdemEvents> = { a: createEvents(), b: createEvents() };
    for (const name of ['a', 'b'] as const) {
      cellEvents[name].on('error', ({ error }) => workerErrors[name].push(error));
    }
    // Each cell's workers, on its own database only.
    const dispatchers: Record<string, OutboxDispatcher> = cells.map((cell) =>
      createOutboxDispatcher({
        sql: cell.sql,
        schema,
        pollIntervalMs: 50,
        outageBackoff: { baseMs: 100, maxMs: 1000 },
        events: cellEvents[cell.name as 'a' | 'b'],
        publisher: createInDatabasePublisher({
          inbox: createInbox({ sql: cell.sql, schema }),
          subscribers: [
            {
              consumer: 'ledger',
              topics: ['payments'],
              handler: async (tx, event) => {
                const { payment } = event.payload as { payment: string };
                await tx.query(
                  `INSERT INTO ${s}.credits (tenant_id, payment_id, event_id) VALUES ($1, $2, $3)`,
                  [event.tenant, payment, event.id],
                );
              },
            },
          ],
        }),
      }),
    );
    for (const dispatcher of Object.values(dispatchers)) await dispatcher.start();
    const workers = Object.values(
      cells.map((cell) =>
        createClaimsWorker({
          claims: cell.claims,
          queue: 'receipts',
          handler: async (tx, task) => {
            const { payment } = task.payload as { payment: string };
            await tx.query(`INSERT INTO ${s}.receipts (tenant_id, payment_id) VALUES ($1, $2)`, [
              task.tenant,
              payment,
            ]);
          },
          pollIntervalMs: 50,
          events: cellEvents[cell.name as 'a' | 'b'],
        }),
      ),
    );
    for (const worker of workers) await worker.start();

    // Clients: every payment requested twice at once, retried on failure (same key), until done.
    const errors: Record<'a' | 'b', unknown[]> = { a: [], b: [] };
    const completed: Record<'a' | 'b', number> = { a: 0, b: 0 };
    const deadline = Date.now() + 90_000;
    const client = async (tenant: string, n: number) => {
      const cell = cells.cellOf(tenant) as 'a' | 'b';
      for (;;) {
        try {
          const result = await pay(tenant, n);
          completed[cell]++;
          return result;
        } catch (error) {
          errors[cell].push(error);
          if (Date.now() > deadline) throw error;
          await sleep(100);
        }
      }
    };
    const calls = [...tenantsOf.a, ...tenantsOf.b].flatMap((tenant) =>
      Array.from({ length: paymentsPerTenant }, (_, n) => ({ tenant, n })),
    );
    let next = 0;
    const clients = Array.from({ length: 8 }, async () => {
      while (next < calls.length) {
        const { tenant, n } = calls[next++]!;
        const [first, second] = await Promise.all([client(tenant, n), client(tenant, n)]);
        expect(second.value).toEqual(first.value);
      }
    });

    // Cell b's server goes down mid-run, then comes back on the same port and data.
    const total = paymentsPerTenant * tenantsOf.b.length * 2;
    while (completed.b < total / 3) await sleep(20);
    const errorsOfABefore = errors.a.length;
    const completedAtStop = completed.b;
    const stoppedAt = performance.now();
    // Fast shutdown at once: every open session ends (57P01), open transactions roll back.
    await embedded.stop({ waitForSessionsMs: 0 });
    await sleep(1500);
    await startCellB();
    const downMs = Math.round(performance.now() - stoppedAt);
    await Promise.all(clients);
    console.log(
      `[cells] b down ${downMs} ms after ${completedAtStop}/${total} of its calls; calls that failed and were retried: b ${errors.b.length}, a ${errors.a.length}`,
    );
    expect(errors.b.length).toBeGreaterThan(0); // the outage was felt, by b's clients only
    expect(errors.a.slice(errorsOfABefore)).toEqual([]);
    expect(errors.a).toEqual([]);
    expect(workerErrors.b.length).toBeGreaterThan(0);

    // Drained: every event credited, every task done, in both cells.
    const count = async (pool: pg.Pool, sql: string) =>
      Number((await pool.query<{ n: number }>(sql)).rows[0]!.n);
    const drainStarted = performance.now();
    const expected = paymentsPerTenant * 2;
    for (const pool of [poolA, poolB]) {
      for (let waited = 0; waited < 60_000; waited += 100) {
        const credits = await count(pool, `SELECT count(*)::int AS n FROM ${s}.credits`).catch(() => -1);
        const receipts = await count(pool, `SELECT count(*)::int AS n FROM ${s}.receipts`).catch(() => -1);
        if (credits >= expected && receipts >= expected) break;
        await sleep(100);
      }
    }
    console.log(
      `[cells] clients done ${Math.round(drainStarted - stoppedAt)} ms after the stop; drained in ${Math.round(performance.now() - drainStarted)} ms`,
    );
    stop.abort();
    for (const dispatcher of Object.values(dispatchers)) await dispatcher.stop();
    await Promise.all(workers.map((worker) => worker.stop()));
    expect(workerErrors.a).toEqual([]);

    for (const [name, pool] of [
      ['a', poolA],
      ['b', poolB],
    ] as const) {
      const tenants: string[] = [...tenantsOf[name]];
      const per = async (table: string, column: string) =>
        (
          await pool.query<{ tenant_id: string; n: number; distinct: number }>(
            `SELECT tenant_id, count(*)::int AS n, count(DISTINCT ${column})::int AS distinct
              FROM ${s}.${table} GROUP BY tenant_id ORDER BY tenant_id`,
          )
        ).rows;
      const once = tenants.map((tenant_id) => ({
        tenant_id,
        n: paymentsPerTenant,
        distinct: paymentsPerTenant,
      }));
      expect(await per('payments', 'id'), `payments of ${name}`).toEqual(once);
      expect(await per('credits', 'payment_id'), `credits of ${name}`).toEqual(once);
      expect(await per('receipts', 'payment_id'), `receipts of ${name}`).toEqual(once);
      const { rows: left } = await pool.query(
        `SELECT (SELECT count(*) FROM ${s}.outbox WHERE published_at IS NULL)::int AS outbox,
            (SELECT count(*) FROM ${s}.tasks WHERE state <> 'completed')::int AS tasks,
            (SELECT count(*) FROM ${s}.requests WHERE state <> 'completed')::int AS requests,
            (SELECT count(*) FROM ${s}.inbox WHERE state <> 'processed')::int AS inbox`,
      );
      expect(left[0], `left over in ${name}`).toEqual({ outbox: 0, tasks: 0, requests: 0, inbox: 0 });

      // No cross-cell row: every table of the cell holds only the cell's tenants.
      const { rows: tables } = await pool.query<{ table_name: string }>(
        `SELECT table_name FROM information_schema.columns WHERE table_schema = $1 AND column_name = 'tenant_id'`,
        [schema],
      );
      expect(tables.length).toBeGreaterThan(15);
      for (const { table_name } of tables) {
        const { rows } = await pool.query<{ tenant_id: string }>(
          `SELECT DISTINCT tenant_id FROM ${s}.${table_name}`,
        );
        const strangers = rows.map((r) => r.tenant_id).filter((t) => !tenants.includes(t));
        expect(strangers, `${table_name} of cell ${name}`).toEqual([]);
      }
    }

    // After the restart, a retry of a finished payment replays from the cell that has it.
    const replay = await pay('brio', 0);
    expect(replay).toMatchObject({ replayed: true, value: { payment: 'p-0', amount: 0 } });
  });

  it('the console reads the cell its ?cell= names, and offers a cell selector', async () => {
    // A dead task in cell b only.
    const { claims } = cells.forTenant('bolt');
    await claims.enqueue({ tenant: 'bolt', queue: 'doomed', key: 'x', payload: {} });
    const [task] = await claims.claim('doomed', { tenant: 'bolt' });
    await claims.fail(task!, new Error('no'), { retryable: false });

    const app = Fastify();
    await app.register(consolePlugin, { cells: cells.sqls, schema });
    try {
      const get = async (url: string) => {
        const res = await app.inject({ method: 'GET', url });
        return { status: res.statusCode, body: res.json<Record<string, unknown>>() };
      };
      expect(await get('/console/api/cells')).toEqual({ status: 200, body: { cells: ['a', 'b'] } });
      const deadIn = async (query: string) =>
        ((await get(`/console/api/tasks?queue=doomed${query}`)).body.dead as { tenant: string }[]).map(
          (t) => t.tenant,
        );
      expect(await deadIn('&cell=b')).toEqual(['bolt']);
      expect(await deadIn('&cell=a')).toEqual([]);
      expect(await deadIn('')).toEqual([]); // the first cell by default
      const unknown = await get('/console/api/tasks?cell=zzz');
      expect(unknown.status).toBe(400);
      expect(String(unknown.body.detail)).toContain('no cell');
      expect((await get('/console/api/summary?cell=b')).status).toBe(200);
      const page = await app.inject({ method: 'GET', url: '/console' });
      expect(page.body).toContain('id="cell"');
    } finally {
      await app.close();
    }
    // One database without cells: no cell names, and ?cell= of any name is refused.
    const single = Fastify();
    await single.register(consolePlugin, { pool: poolA, schema });
    try {
      expect((await single.inject({ method: 'GET', url: '/console/api/cells' })).json()).toEqual({
        cells: [],
      });
      expect((await single.inject({ method: 'GET', url: '/console/api/tasks?cell=a' })).statusCode).toBe(400);
    } finally {
      await single.close();
    }
  });
});
