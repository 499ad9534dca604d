/**
 * Adapters that send idem's record together with COMMIT (`queryAndCommit`): node-postgres on a
 * pool in pipeline mode (BEGIN also goes out with the handler's first statement,
 * src/adapters/pg-pipeline.ts) and postgres.js, which pipelines every connection
 * (src/adapters/postgres.ts). What must hold whatever the round trips: the handler's writes and
 * the record commit together or not at all, a failure at COMMIT stores nothing and leaves the
 * pool usable, and a lost connection is not handed out again. The same for a local step of
 * `idem.steps`, whose result goes out with COMMIT too (src/steps/engine.ts): its writes and its
 * recorded result commit together, a holder that was taken over commits nothing, and errors keep
 * their SQLSTATE. Last, the round trips themselves, counted on the wire by the test proxy.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { fromPostgresJs } from 'idem/postgres';
import { createManualClock, type ManualClock } from 'idem/testing';
import {
  createIdem,
  type Idem,
  isCommitOutcomeUnknown,
  isFenced,
  isOperationFailed,
  isRetryable,
  isStepFailed,
  migrate,
  type Queryable,
  type Sql,
} from 'idem';
import { canCommitWith } from '../../src/core/sql.js';
import { countRows, createTestSchema, databaseUrl } from '../support/database.js';
import { startPgProxyTo } from '../support/faults/pg-proxy.js';
import { waitFor } from '../support/poll.js';

const day = 86_400_000;

interface Driver {
  name: string;
  /** idem's `Sql` over a pool of 4 connections, and a way to close it. */
  open(): { sql: Sql; close(): Promise<void> };
}

const drivers: Driver[] = [
  {
    name: 'node-postgres, pool in pipeline mode',
    open() {
      const pool = new pg.Pool({ connectionString: databaseUrl(), max: 4, pipeline: true });
      return { sql: fromPg(pool), close: () => pool.end() };
    },
  },
  {
    name: 'postgres.js',
    open() {
      const client = postgres(databaseUrl(), { max: 4, onnotice: () => {} });
      return { sql: fromPostgresJs(client), close: () => client.end() };
    },
  },
];

describe('fromPg without pipeline mode', () => {
  it('does not offer the record-with-COMMIT capability', async () => {
    const sequential = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
    try {
      await fromPg(sequential).transaction(async (tx) => {
        expect(canCommitWith(tx)).toBe(false);
      });
    } finally {
      await sequential.end();
    }
  });
});

describe.each(drivers)('$name: the record goes out with COMMIT', (driver) => {
  const schema = `idem_pipe_${randomBytes(4).toString('hex')}`;
  let db: ReturnType<Driver['open']>;
  let clock: ManualClock;
  let idem: Idem;

  beforeAll(async () => {
    db = driver.open();
    await migrate(db.sql, { schema });
    await db.sql.query(`
      CREATE TABLE "${schema}".effects (id serial PRIMARY KEY, intent text NOT NULL);
      CREATE TABLE "${schema}".deferred (
        code text UNIQUE DEFERRABLE INITIALLY DEFERRED
      );`);
    clock = createManualClock({ startMs: Date.now() });
    idem = createIdem({
      sql: db.sql,
      schema,
      clock,
      retention: { resultMs: day, tombstoneMs: 2 * day },
    });
  });
  afterAll(async () => {
    await db.sql.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await db.close();
  });

  const insertEffect = async (tx: Queryable, intent: string) => {
    await tx.query(`INSERT INTO "${schema}".effects (intent) VALUES ($1)`, [intent]);
  };
  const effects = (intent: string) =>
    countRows(db.sql, `SELECT count(*)::int AS n FROM "${schema}".effects WHERE intent = $1`, [intent]);
  /** A handler that writes the effect of `key` and answers `answer(runs so far)`; `runs()` counts its runs. */
  const paying = <T>(key: string, answer: (runs: number) => T) => {
    let runs = 0;
    const handler = async (tx: Queryable) => {
      runs++;
      await insertEffect(tx, key);
      return answer(runs);
    };
    return { handler, runs: () => runs };
  };
  const keyOf = () => `k-${randomBytes(6).toString('hex')}`;
  /**
   * A handler that writes the effect of `key`, then a row whose deferred unique check fails at
   * COMMIT (the code is taken already); `expectCommitFailure` checks what such a run threw.
   */
  const breaksAtCommit = async (key: string) => {
    const code = `c-${randomBytes(4).toString('hex')}`;
    await db.sql.query(`INSERT INTO "${schema}".deferred (code) VALUES ($1)`, [code]);
    return async (tx: Queryable) => {
      await insertEffect(tx, key);
      await tx.query(`INSERT INTO "${schema}".deferred (code) VALUES ($1)`, [code]);
      return 'ok';
    };
  };
  const expectCommitFailure = async (error: unknown, key: string) => {
    expect(isOperationFailed(error)).toBe(true);
    expect((error as { cause?: { code?: string } }).cause?.code).toBe('23505');
    expect(await effects(key)).toBe(0);
  };

  it('offers the record-with-COMMIT capability inside its transactions', async () => {
    await db.sql.transaction(async (tx) => {
      expect(canCommitWith(tx)).toBe(true);
    });
  });

  it('keeps the handler inside the transaction: a throw after a write leaves no effect and no key', async () => {
    const key = keyOf();
    const error = await idem
      .run({ tenant: 'acme', operation: 'pay', key, request: {} }, async (tx) => {
        await insertEffect(tx, key);
        throw new Error('card declined');
      })
      .catch((e: unknown) => e);
    expect(isOperationFailed(error)).toBe(true);
    expect(await effects(key)).toBe(0);
    expect(await idem.get({ tenant: 'acme', operation: 'pay', key })).toBeNull();
  });

  it('a failure at COMMIT (a deferred constraint) stores nothing, keeps no effect, and the pool goes on', async () => {
    const key = keyOf();
    const error = await idem
      .run(
        { tenant: 'acme', operation: 'pay', key, request: {}, transactionRetries: 0 },
        await breaksAtCommit(key),
      )
      .catch((e: unknown) => e);
    await expectCommitFailure(error, key);
    expect(await idem.get({ tenant: 'acme', operation: 'pay', key })).toBeNull();
    // Every connection of the pool is still usable.
    const again = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        idem.run({ tenant: 'acme', operation: 'pay', key: `${key}-${i}`, request: {} }, async (tx) => {
          await insertEffect(tx, `${key}-after`);
          return i;
        }),
      ),
    );
    expect(again.map((r) => r.value)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(await effects(`${key}-after`)).toBe(8);
  });

  it('without the read in front, a retry of a recorded key rolls its run back and replays', async () => {
    const key = keyOf();
    const spec = { tenant: 'acme', operation: 'pay', key, request: { n: 1 }, readFirst: false };
    const pay = paying(key, () => ({ paid: true }));
    expect((await idem.run(spec, pay.handler)).replayed).toBe(false);
    const retry = await idem.run(spec, pay.handler);
    expect(retry).toMatchObject({ replayed: true, value: { paid: true } });
    expect(pay.runs()).toBe(2); // the retry ran, and its writes rolled back with the failed record
    expect(await effects(key)).toBe(1);
  });

  it('takes over a key past its tombstone without the read in front (one extra run, rolled back)', async () => {
    const key = keyOf();
    const spec = { tenant: 'acme', operation: 'pay', key, request: { n: 1 }, readFirst: false };
    const pay = paying(key, (runs) => runs);
    await idem.run(spec, pay.handler);
    clock.advance(3 * day);
    const fresh = await idem.run(spec, pay.handler);
    expect(fresh.replayed).toBe(false);
    expect(pay.runs()).toBe(3);
    expect(fresh.value).toBe(3);
    expect(await effects(key)).toBe(2);
    expect((await idem.get({ tenant: 'acme', operation: 'pay', key }))?.state).toBe('completed');
  });

  it('concurrent duplicates: one effect, every caller gets the same answer', async () => {
    const key = keyOf();
    const spec = { tenant: 'acme', operation: 'pay', key, request: { n: 1 }, readFirst: false };
    const results = await Promise.all(
      Array.from({ length: 12 }, () =>
        idem.run(spec, async (tx) => {
          await insertEffect(tx, key);
          return { id: key };
        }),
      ),
    );
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);
    expect(new Set(results.map((r) => JSON.stringify(r.value)))).toEqual(
      new Set([JSON.stringify({ id: key })]),
    );
    expect(await effects(key)).toBe(1);
  });

  describe('a local step of idem.steps', () => {
    const lease = 30_000; // createIdem's default leaseMs
    const steps = (key: string) =>
      db.sql.query<{ step: string; result: string | null }>(
        `SELECT step, result FROM "${schema}".steps WHERE idempotency_key = $1 ORDER BY step`,
        [key],
      );
    const stepSpec = (key: string) => ({ tenant: 'acme', operation: 'order', key, request: {}, waitMs: 0 });

    it("records its result with COMMIT: the step's writes and its result commit together", async () => {
      const key = keyOf();
      const result = await idem.steps(stepSpec(key), async (op) => {
        const reserved = await op.step('reserve', async (tx) => {
          await insertEffect(tx, `${key}-reserve`);
          return { reserved: 2 };
        });
        const thrown = await op
          .step('refused', async (tx) => {
            await insertEffect(tx, `${key}-refused`);
            throw Object.assign(new Error('out of stock'), { retryable: true });
          })
          .catch((e: unknown) => e);
        expect((thrown as Error).message).toBe('out of stock');
        return reserved;
      });
      expect(result).toMatchObject({ replayed: false, value: { reserved: 2 } });
      expect(await effects(`${key}-reserve`)).toBe(1);
      expect(await effects(`${key}-refused`)).toBe(0);
      expect((await steps(key)).rows).toEqual([{ step: 'reserve', result: '{"reserved":2}' }]);
      // The pool goes on: every connection ended its transaction.
      const after = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          idem.steps(stepSpec(`${key}-${i}`), (op) => op.step('one', async () => i)),
        ),
      );
      expect(after.map((r) => r.value)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    });

    it('a failure at COMMIT (a deferred constraint) records nothing, keeps no effect, and keeps its SQLSTATE', async () => {
      const key = keyOf();
      const handler = await breaksAtCommit(key);
      const error = await idem
        .steps(stepSpec(key), (op) => op.step('reserve', handler))
        .catch((e: unknown) => e);
      // Nothing committed: the key is freed and the failure is the step's own, 23505 at COMMIT.
      await expectCommitFailure(error, key);
      expect((await steps(key)).rows).toEqual([]);
      expect(await idem.get({ tenant: 'acme', operation: 'order', key })).toBeNull();
    });

    it("a record that raises rolls the step's writes back with it (COMMIT answers with a rollback)", async () => {
      const key = keyOf();
      const error = await idem
        .steps(stepSpec(key), (op) =>
          op.step('reserve', async (tx) => {
            await insertEffect(tx, key);
            // Another connection records the step first: the step's own record meets its row (23505).
            await db.sql.query(
              `INSERT INTO "${schema}".steps (tenant_id, operation, idempotency_key, step, result, fence)
               VALUES ('acme', 'order', $1, 'reserve', '"other"', $2)`,
              [key, op.fence],
            );
            return 'mine';
          }),
        )
        .catch((e: unknown) => e);
      expect(isStepFailed(error)).toBe(true);
      expect(error).toMatchObject({ step: 'reserve', cause: { code: '23505' } });
      expect(await effects(key)).toBe(0);
      expect((await steps(key)).rows).toEqual([{ step: 'reserve', result: '"other"' }]);
    });

    it('a holder taken over commits nothing more; a takeover waiting on its step finds the step recorded', async () => {
      const key = keyOf();
      let successorRuns = 0;
      const successor = () =>
        idem.steps(stepSpec(key), async (op) => {
          expect(op.resumed).toBe(true);
          await op.step('one', async () => {
            successorRuns++;
            return 'successor-one';
          });
          await op.step('two', async () => {
            successorRuns++;
            return 'successor-two';
          });
          return 'successor';
        });
      let taking: Promise<unknown> | undefined;
      const zombie = await idem
        .steps(stepSpec(key), async (op) => {
          await op.step('one', async (tx) => {
            await insertEffect(tx, `${key}-one`);
            // The lease lapses while the step runs; the successor waits on the row this step's
            // transaction locked, and goes on (takes over) once its record and COMMIT are in.
            clock.advance(lease + 1);
            taking = successor();
            await waitFor(
              async () =>
                (await countRows(
                  db.sql,
                  `SELECT count(*)::int AS n FROM pg_stat_activity
                   WHERE wait_event_type = 'Lock' AND query LIKE $1`,
                  [`%"${schema}".requests%`],
                )) > 0,
              'the takeover to wait on the step',
            );
            return 'zombie-one';
          });
          await taking;
          // Taken over: this holder's next step writes nothing, and its completion is refused.
          await op.step('two', async (tx) => {
            await insertEffect(tx, `${key}-two`);
            return 'zombie-two';
          });
          return 'zombie';
        })
        .catch((e: unknown) => e);
      expect(isFenced(zombie)).toBe(true);
      expect(successorRuns).toBe(1); // 'one' was recorded before the takeover read the steps
      expect(await effects(`${key}-one`)).toBe(1);
      expect(await effects(`${key}-two`)).toBe(0);
      expect((await steps(key)).rows).toEqual([
        { step: 'one', result: '"zombie-one"' },
        { step: 'two', result: '"successor-two"' },
      ]);
      expect(await idem.get({ tenant: 'acme', operation: 'order', key })).toMatchObject({
        state: 'completed',
        result: '"successor"',
      });
    });
  });

  it('a connection cut inside the transaction fails the call, stores nothing, and is not reused', async () => {
    const key = keyOf();
    const error = await idem
      .run({ tenant: 'acme', operation: 'pay', key, request: {}, transactionRetries: 0 }, async (tx) => {
        await insertEffect(tx, key);
        const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
        await db.sql.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
        return 'unreachable';
      })
      .catch((e: unknown) => e);
    // The record and COMMIT went out on a connection that died: failed for sure, or an unknown
    // outcome when they were already written (`CommitOutcomeUnknownError`); retryable either way.
    expect(isOperationFailed(error) || isCommitOutcomeUnknown(error)).toBe(true);
    expect(isRetryable(error)).toBe(true);
    expect(await effects(key)).toBe(0);
    const after = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        idem.run({ tenant: 'acme', operation: 'pay', key: `${key}-${i}`, request: {} }, async () => i),
      ),
    );
    expect(after.map((r) => r.value)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });
});

describe('round trips on the wire (the test proxy counts the times a client waited for the server)', () => {
  let direct: Awaited<ReturnType<typeof createTestSchema>>;
  let proxy: Awaited<ReturnType<typeof startPgProxyTo>>;
  const pools: pg.Pool[] = [];

  beforeAll(async () => {
    direct = await createTestSchema({ poolSize: 1 });
    await direct.pool.query(
      `CREATE TABLE "${direct.schema}".effects (id serial PRIMARY KEY, intent text NOT NULL)`,
    );
    proxy = await startPgProxyTo(databaseUrl());
  });
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
    await proxy.close();
    await direct.close();
  });

  /** An `Idem` over one proxied connection, opened before counting starts. */
  const proxiedIdem = async (pipeline: boolean) => {
    const pool = new pg.Pool({ connectionString: proxy.url(databaseUrl()), max: 1, pipeline });
    pools.push(pool);
    await pool.query('SELECT 1');
    const clock = createManualClock({ startMs: Date.now() }); // no heartbeat beats on its own
    return createIdem({ sql: fromPg(pool), schema: direct.schema, clock, readFirst: false });
  };
  const write = (tx: Queryable, intent: string) =>
    tx.query(`INSERT INTO "${direct.schema}".effects (intent) VALUES ($1)`, [intent]);
  /** The round trips of `fn`, on a proxy nothing else uses meanwhile. */
  const roundTripsOf = async (fn: () => Promise<unknown>) => {
    proxy.resetStats();
    await fn();
    return proxy.stats().roundTrips;
  };
  /** A local step, a call, a local step: the intent of a payment (reserve, charge, confirm). */
  const localCallLocal = (idem: Idem, key: string) =>
    idem.steps({ tenant: 'acme', operation: 'pay', key, request: {} }, async (op) => {
      await op.step('reserve', (tx) => write(tx, `${key}-reserve`));
      const charge = await op.call('charge', async ({ key: sent }) => ({ id: sent }));
      await op.step('confirm', (tx) => write(tx, charge.id));
      return charge;
    });

  it("idem.run's first execution: 2 round trips on a pipelined pool, 4 on a default one", async () => {
    for (const [pipeline, expected] of [
      [true, 2],
      [false, 4],
    ] as const) {
      const idem = await proxiedIdem(pipeline);
      for (let i = 0; i < 3; i++) {
        const key = `run-${pipeline}-${i}-${randomBytes(4).toString('hex')}`;
        const spec = { tenant: 'acme', operation: 'pay', key, request: {} };
        expect(await roundTripsOf(() => idem.run(spec, (tx) => write(tx, key)))).toBe(expected);
      }
    }
  });

  it('local–call–local: 10 round trips per intent on a pipelined pool (14 on a default one)', async () => {
    // Pipelined: the claim; per step BEGIN with the fence check, the step's INSERT, the record
    // with COMMIT; the call's start and its record; the completion.
    for (const [pipeline, expected] of [
      [true, 10],
      [false, 14],
    ] as const) {
      const idem = await proxiedIdem(pipeline);
      for (let i = 0; i < 3; i++) {
        const key = `steps-${pipeline}-${i}-${randomBytes(4).toString('hex')}`;
        expect(await roundTripsOf(() => localCallLocal(idem, key))).toBe(expected);
        expect(
          await countRows(
            direct.pool,
            `SELECT count(*)::int AS n FROM "${direct.schema}".steps WHERE idempotency_key = $1`,
            [key],
          ),
        ).toBe(3);
      }
    }
  });
});
