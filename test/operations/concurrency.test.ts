import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  isInProgress,
  isKeyReused,
  type InProgressError,
  type OperationFailedError,
} from '../../src/core/errors.js';
import type { Queryable } from '../../src/core/sql.js';
import type { OperationSpec } from '../../src/operations/options.js';
import { createIdem, type Idem } from '../../src/operations/idem.js';
import { adapterFactories, prepareAdapter, type AdapterUnderTest } from '../support/adapters.js';
import { recordings } from '../support/recordings.js';

const concurrentAdapters = adapterFactories.filter((f) => f.name !== 'pglite');

const cases = recordings.flatMap((recording) =>
  concurrentAdapters.map((factory) => ({ recording, factory })),
);

describe.each(cases)(
  'concurrent duplicates recorded at $recording on $factory.name',
  ({ recording, factory }) => {
    const schema = `idem_cc_${recording}_${factory.name.replace(/\W/g, '')}_${randomBytes(3).toString('hex')}`;
    let adapter: AdapterUnderTest;
    let idem: Idem;

    beforeAll(async () => {
      adapter = await prepareAdapter(factory, schema);
      idem = createIdem({ sql: adapter.sql, schema, waitMs: 10_000, recording });
    });
    afterAll(() => adapter.close());

    const insertEffect = async (tx: Queryable, intent: string) => {
      const { rows } = await tx.query<{ id: number }>(
        `INSERT INTO "${schema}".effects (tenant, intent) VALUES ('acme', $1) RETURNING id`,
        [intent],
      );
      return rows[0]!.id;
    };

    const effectCount = async (intent: string) => {
      const { rows } = await adapter.sql.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".effects WHERE intent = $1`,
        [intent],
      );
      return Number(rows[0]!.n);
    };

    /**
     * The first execution records `spec` inside its caller's transaction, which stays open until
     * `commit()`; resolves once the record is written (uncommitted), so a duplicate meets it.
     */
    const recordAndHold = async <T>(spec: OperationSpec, handler: (tx: Queryable) => Promise<T>) => {
      let commit!: () => void;
      const committing = new Promise<void>((resolve) => (commit = resolve));
      let recorded!: () => void;
      const isRecorded = new Promise<void>((resolve) => (recorded = resolve));
      const first = adapter.userTransaction(async (tx) => {
        const result = await idem.runIn(tx, spec, handler);
        recorded();
        await committing;
        return result;
      });
      await isRecorded;
      return { first, commit };
    };

    it('runs 60 concurrent identical requests to one effect; every caller gets the same result', async () => {
      const key = `conc-${randomBytes(4).toString('hex')}`;
      const spec = { tenant: 'acme', operation: 'create-order', key, request: { amount: 42 } };
      let runs = 0;
      const results = await Promise.all(
        Array.from({ length: 60 }, () =>
          idem.run(spec, async (tx) => {
            runs++;
            // Hold the transaction a little, so the duplicates really arrive while it is in flight.
            // `::text`: pg_sleep returns void, which Prisma cannot read.
            await tx.query('SELECT pg_sleep(0.05)::text');
            return { id: await insertEffect(tx, key) };
          }),
        ),
      );
      // Claim-first: the duplicates wait before their handlers. At commit: they run theirs, and
      // their writes roll back when they find the winner's record.
      if (recording === 'claim') expect(runs).toBe(1);
      else expect(runs).toBeGreaterThanOrEqual(1);
      expect(await effectCount(key)).toBe(1);
      expect(results.filter((r) => !r.replayed)).toHaveLength(1);
      expect(new Set(results.map((r) => JSON.stringify(r.value))).size).toBe(1);
    });

    it.runIf(recording === 'claim')(
      'gives a typed in-progress error with a retry hint once the bounded wait runs out',
      async () => {
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
        release();
        expect(isInProgress(error)).toBe(true);
        expect((error as InProgressError).retryAfterMs).toBeGreaterThan(0);
        expect(waited).toBeGreaterThanOrEqual(250);
        // No upper bound on the clock: the holder is released only after this answer, so an answer at all
        // shows the wait gave up at its bound rather than waiting for the holder.
        const done = await first;
        const replay = await idem.run(spec, async () => -1);
        expect(replay).toMatchObject({ replayed: true, value: done.value });
      },
    );

    it.runIf(recording === 'commit')(
      'the first to commit wins: a duplicate that started earlier rolls its effect back and replays',
      async () => {
        const key = `race-${randomBytes(4).toString('hex')}`;
        const spec = { tenant: 'acme', operation: 'race', key, request: { amount: 1 } };
        let release!: () => void;
        const gate = new Promise<void>((resolve) => (release = resolve));
        let wrote!: () => void;
        const written = new Promise<void>((resolve) => (wrote = resolve));
        const early = idem.run(spec, async (tx) => {
          const id = await insertEffect(tx, key);
          wrote();
          await gate; // its record is not written yet
          return { id, by: 'early' };
        });
        await written;
        const late = await idem.run(spec, async (tx) => ({ id: await insertEffect(tx, key), by: 'late' }));
        release();
        const earlyResult = await early;
        expect(late).toMatchObject({ replayed: false, value: { by: 'late' } });
        expect(earlyResult).toMatchObject({ replayed: true, value: late.value });
        expect(await effectCount(key)).toBe(1);
      },
    );

    it.runIf(recording === 'commit')(
      'a duplicate waits on the key until the first commits, then replays; its own writes roll back',
      async () => {
        const key = `wait-${randomBytes(4).toString('hex')}`;
        const spec = { tenant: 'acme', operation: 'wait', key, request: { amount: 1 }, readFirst: false };
        // The first records inside its caller's transaction, which stays open until `commit`.
        const { first, commit } = await recordAndHold(spec, async (inner) => ({
          id: await insertEffect(inner, key),
        }));
        let duplicateRan = false;
        const duplicate = idem.run(spec, async (tx) => {
          duplicateRan = true;
          return { id: await insertEffect(tx, key) };
        });
        await new Promise((resolve) => setTimeout(resolve, 200));
        expect(await effectCount(key)).toBe(0); // neither has committed
        commit();
        const [firstResult, duplicateResult] = await Promise.all([first, duplicate]);
        expect(duplicateRan).toBe(true);
        expect(firstResult.replayed).toBe(false);
        expect(duplicateResult).toMatchObject({ replayed: true, value: firstResult.value });
        expect(await effectCount(key)).toBe(1);
      },
    );

    it.runIf(recording === 'commit')(
      'a concurrent duplicate with another request waits, then rolls back and is refused',
      async () => {
        const key = `mismatch-${randomBytes(4).toString('hex')}`;
        const spec = { tenant: 'acme', operation: 'mismatch', key, request: { amount: 1 }, readFirst: false };
        const { first, commit } = await recordAndHold(spec, (inner) => insertEffect(inner, key));
        const other = idem
          .run({ ...spec, request: { amount: 2 } }, async (tx) => insertEffect(tx, key))
          .catch((e: unknown) => e);
        await new Promise((resolve) => setTimeout(resolve, 100));
        commit();
        await first;
        expect(isKeyReused(await other)).toBe(true);
        expect(await effectCount(key)).toBe(1);
      },
    );

    it.runIf(recording === 'commit')(
      'gives a typed in-progress error once the wait on an uncommitted record runs out',
      async () => {
        const key = `held-${randomBytes(4).toString('hex')}`;
        const spec = { tenant: 'acme', operation: 'held', key, readFirst: false };
        const { first, commit } = await recordAndHold(spec, (inner) => insertEffect(inner, key));
        const t0 = performance.now();
        const error = await idem
          .run({ ...spec, waitMs: 300 }, async (tx) => insertEffect(tx, key))
          .catch((e: unknown) => e);
        const waited = performance.now() - t0;
        commit();
        const done = await first;
        expect(isInProgress(error)).toBe(true);
        expect((error as InProgressError).retryAfterMs).toBeGreaterThan(0);
        expect(waited).toBeGreaterThanOrEqual(250);
        // No upper bound on the clock: the holder is released only after this answer, so an answer at all
        // shows the wait gave up at its bound rather than waiting for the holder.
        expect(await idem.run(spec, async () => -1)).toMatchObject({ replayed: true, value: done.value });
        expect(await effectCount(key)).toBe(1);
      },
    );
  },
);

describe.each(recordings)('whole-transaction retry on deadlock (pg), recorded at %s', (recording) => {
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
    const idem = createIdem({ sql: adapter.sql, schema, transactionRetries: 3, recording });
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
    const { counted, calls } = deadlockingTransfers([`a-to-b-${recording}`, `b-to-a-${recording}`]);
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
