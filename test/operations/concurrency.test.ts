import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isInProgress, type InProgressError, type OperationFailedError } from '../../src/core/errors.js';
import type { Queryable } from '../../src/core/sql.js';
import { createIdem, type Idem } from '../../src/operations/idem.js';
import { adapterFactories, prepareAdapter, type AdapterUnderTest } from '../support/adapters.js';

const concurrentAdapters = adapterFactories.filter((f) => f.name !== 'pglite');

describe.each(concurrentAdapters)('concurrent duplicates on $name', (factory) => {
  const schema = `idem_cc_${factory.name.replace(/\W/g, '')}_${randomBytes(3).toString('hex')}`;
  let adapter: AdapterUnderTest;
  let idem: Idem;

  beforeAll(async () => {
    adapter = await prepareAdapter(factory, schema);
    idem = createIdem({ sql: adapter.sql, schema, waitMs: 10_000 });
  });
  afterAll(() => adapter.close());

  const insertEffect = async (tx: Queryable, intent: string) => {
    const { rows } = await tx.query<{ id: number }>(
      `INSERT INTO "${schema}".effects (tenant, intent) VALUES ('acme', $1) RETURNING id`,
      [intent],
    );
    return rows[0]!.id;
  };

  it('runs 60 concurrent identical requests once; every caller gets the same result', async () => {
    const key = `conc-${randomBytes(4).toString('hex')}`;
    const spec = { tenant: 'acme', operation: 'create-order', key, request: { amount: 42 } };
    let runs = 0;
    const results = await Promise.all(
      Array.from({ length: 60 }, () =>
        idem.run(spec, async (tx) => {
          runs++;
          // Hold the claim a little, so the duplicates really arrive while it is in flight.
          // `::text`: pg_sleep returns void, which Prisma cannot read.
          await tx.query('SELECT pg_sleep(0.05)::text');
          return { id: await insertEffect(tx, key) };
        }),
      ),
    );
    expect(runs).toBe(1);
    const { rows } = await adapter.sql.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${schema}".effects WHERE intent = $1`,
      [key],
    );
    expect(Number(rows[0]!.n)).toBe(1);
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);
    expect(new Set(results.map((r) => JSON.stringify(r.value))).size).toBe(1);
  });

  it('gives a typed in-progress error with a retry hint once the bounded wait runs out', async () => {
    const key = `slow-${randomBytes(4).toString('hex')}`;
    const spec = { tenant: 'acme', operation: 'slow', key };
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    const first = idem.run(spec, async (tx) => {
      started();
      await gate;
      return insertEffect(tx, key);
    });
    await running;
    const t0 = performance.now();
    const error = await idem.run({ ...spec, waitMs: 300 }, async () => -1).catch((e: unknown) => e);
    const waited = performance.now() - t0;
    expect(isInProgress(error)).toBe(true);
    expect((error as InProgressError).retryAfterMs).toBeGreaterThan(0);
    expect(waited).toBeGreaterThanOrEqual(250);
    expect(waited).toBeLessThan(3000);
    release();
    const done = await first;
    const replay = await idem.run(spec, async () => -1);
    expect(replay).toMatchObject({ replayed: true, value: done.value });
  });
});

describe('whole-transaction retry on deadlock (pg)', () => {
  const factory = adapterFactories.find((f) => f.name === 'pg')!;
  const schema = `idem_dl_${randomBytes(3).toString('hex')}`;
  let adapter: AdapterUnderTest;

  beforeAll(async () => {
    adapter = await prepareAdapter(factory, schema);
    await adapter.sql.query(`CREATE TABLE "${schema}".accounts (id int PRIMARY KEY, balance int NOT NULL)`);
    await adapter.sql.query(`INSERT INTO "${schema}".accounts VALUES (1, 0), (2, 0)`);
  });
  afterAll(() => adapter.close());

  /**
   * Two opposite transfers that lock their first account, wait for each other, then take the
   * second: a real deadlock. Counts handler attempts; `spec` adds to each call's spec.
   */
  function deadlockingTransfers(keys: [string, string], spec: { transactionRetries?: number } = {}) {
    const idem = createIdem({ sql: adapter.sql, schema, transactionRetries: 3 });
    const counted = { attempts: 0 };
    let bothLocked!: () => void;
    let arrived = 0;
    const barrier = new Promise<void>((resolve) => (bothLocked = resolve));
    const transfer = (from: number, to: number, key: string) =>
      idem.run({ tenant: 'acme', operation: 'transfer', key, ...spec }, async (tx) => {
        counted.attempts++;
        await tx.query(`UPDATE "${schema}".accounts SET balance = balance - 1 WHERE id = $1`, [from]);
        if (++arrived === 2) bothLocked();
        await Promise.race([barrier, new Promise((r) => setTimeout(r, 2000))]);
        await tx.query(`UPDATE "${schema}".accounts SET balance = balance + 1 WHERE id = $1`, [to]);
        return 'ok';
      });
    return { counted, calls: [transfer(1, 2, keys[0]), transfer(2, 1, keys[1])] };
  }

  it('retries the deadlock victim and both transfers take effect exactly once', async () => {
    const { counted, calls } = deadlockingTransfers(['a-to-b', 'b-to-a']);
    const results = await Promise.all(calls);
    expect(results.map((r) => r.value)).toEqual(['ok', 'ok']);
    // Two first attempts and at least one retried victim (a loaded machine may see a second
    // deadlock between the retry and the winner); each transfer still takes effect once.
    expect(counted.attempts).toBeGreaterThanOrEqual(3);
    const { rows } = await adapter.sql.query<{ id: number; balance: number }>(
      `SELECT id, balance FROM "${schema}".accounts ORDER BY id`,
    );
    expect(rows.map((r) => r.balance)).toEqual([0, 0]);
  });

  it('a per-call transactionRetries of 0 hands the deadlock to the caller as retryable, with nothing stored', async () => {
    const suffix = randomBytes(3).toString('hex');
    const { counted, calls } = deadlockingTransfers([`a-${suffix}`, `b-${suffix}`], {
      transactionRetries: 0,
    });
    const settled = await Promise.allSettled(calls);
    expect(counted.attempts).toBe(2); // no retry
    const failed = settled.filter((s) => s.status === 'rejected');
    expect(failed).toHaveLength(1);
    const error = (failed[0] as PromiseRejectedResult).reason as OperationFailedError;
    expect(error.code).toBe('IDEM_OPERATION_FAILED');
    expect(error.retryable).toBe(true);
    const { rows } = await adapter.sql.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${schema}".requests WHERE idempotency_key LIKE $1`,
      [`%-${suffix}`],
    );
    expect(rows[0]!.n).toBe(1); // the victim's claim rolled back with its writes
    const balances = await adapter.sql.query<{ balance: number }>(
      `SELECT balance FROM "${schema}".accounts ORDER BY id`,
    );
    expect(balances.rows.reduce((sum, r) => sum + r.balance, 0)).toBe(0);
  });
});
