/**
 * Adapters that send idem's record together with COMMIT (`queryAndCommit`): node-postgres on a
 * pool in pipeline mode (BEGIN also goes out with the handler's first statement,
 * src/adapters/pg-pipeline.ts) and postgres.js, which pipelines every connection
 * (src/adapters/postgres.ts). What must hold whatever the round trips: the handler's writes and
 * the record commit together or not at all, a failure at COMMIT stores nothing and leaves the
 * pool usable, and a lost connection is not handed out again.
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
  isOperationFailed,
  isRetryable,
  migrate,
  type Queryable,
  type Sql,
} from 'idem';
import { canCommitWith } from '../../src/core/sql.js';
import { countRows, databaseUrl } from '../support/database.js';

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
    const code = `c-${randomBytes(4).toString('hex')}`;
    await db.sql.query(`INSERT INTO "${schema}".deferred (code) VALUES ($1)`, [code]);
    const key = keyOf();
    const error = await idem
      .run({ tenant: 'acme', operation: 'pay', key, request: {}, transactionRetries: 0 }, async (tx) => {
        await insertEffect(tx, key);
        await tx.query(`INSERT INTO "${schema}".deferred (code) VALUES ($1)`, [code]);
        return 'ok';
      })
      .catch((e: unknown) => e);
    expect(isOperationFailed(error)).toBe(true);
    expect((error as { cause?: { code?: string } }).cause?.code).toBe('23505');
    expect(await effects(key)).toBe(0);
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
