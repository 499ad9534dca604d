/**
 * `lock_timeout` and `statement_timeout` expiring, in idem's own statements and in a handler's:
 * each gives a typed error that says "retry" (InProgressError, or OperationFailedError with
 * `retryable: true`), and leaves nothing behind: no key, no half of the business write. The retry
 * with the same key then runs once.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg, fromPgClient } from 'idem/pg';
import {
  createIdem,
  type Idem,
  isInProgress,
  isOperationFailed,
  isRetryable,
  type Queryable,
  SqlState,
  sqlStateOf,
} from 'idem';
import type { Recording } from '../support/recordings.js';
import { recordings } from '../support/recordings.js';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { createEffects, effectsOf } from '../support/faults/effects.js';

let db: TestSchema;
let idem: Idem;

beforeAll(async () => {
  db = await createTestSchema();
  await createEffects(db.pool, db.schema);
  await db.pool.query(`CREATE TABLE "${db.schema}".accounts (id int PRIMARY KEY, balance int NOT NULL)`);
  await db.pool.query(`INSERT INTO "${db.schema}".accounts VALUES (1, 0)`);
  idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, waitMs: 200 });
});
afterAll(() => db.close());

/** Holds a row lock on account 1 until `release` is called. */
async function holdAccountLock(): Promise<{ release(): Promise<void> }> {
  const client = await db.pool.connect();
  await client.query('BEGIN');
  await client.query(`SELECT * FROM "${db.schema}".accounts WHERE id = 1 FOR UPDATE`);
  return {
    async release() {
      await client.query('ROLLBACK');
      client.release();
    },
  };
}

const transfer = (
  key: string,
  options: { lockTimeout?: string; statementTimeout?: string; sleep?: number; recording?: Recording } = {},
) =>
  idem.run(
    { tenant: 'acme', operation: 'transfer', key, request: { amount: 10 }, recording: options.recording },
    async (tx) => {
      // The half that must not survive: written before the statement that times out.
      await tx.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, 10)`, [key]);
      if (options.lockTimeout) await tx.query(`SET LOCAL lock_timeout = '${options.lockTimeout}'`);
      if (options.statementTimeout)
        await tx.query(`SET LOCAL statement_timeout = '${options.statementTimeout}'`);
      if (options.sleep) await tx.query('SELECT pg_sleep($1)', [options.sleep]);
      await tx.query(`UPDATE "${db.schema}".accounts SET balance = balance + 10 WHERE id = 1`);
      return { moved: 10 };
    },
  );

/**
 * Starts an execution of `transfer` for `key` that holds the key until `release`: claimed before
 * its handler (claim-first), or recorded at commit inside a caller's transaction kept open.
 */
async function holdKey(key: string, recording: Recording): Promise<{ release(): Promise<unknown> }> {
  const spec = { tenant: 'acme', operation: 'transfer', key, request: { amount: 10 }, recording };
  const handler = async (tx: Queryable) => {
    await tx.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, 10)`, [key]);
    return { moved: 10 };
  };
  let releaseFirst!: () => void;
  const firstHolds = new Promise<void>((resolve) => (releaseFirst = resolve));
  let firstHeld!: () => void;
  const held = new Promise<void>((resolve) => (firstHeld = resolve));
  const first =
    recording === 'claim'
      ? idem.run(spec, async (tx) => {
          const value = await handler(tx);
          firstHeld();
          await firstHolds;
          return value;
        })
      : (async () => {
          const client = await db.pool.connect();
          try {
            await client.query('BEGIN');
            const result = await idem.runIn(fromPgClient(client), spec, handler);
            firstHeld();
            await firstHolds;
            await client.query('COMMIT');
            return result;
          } finally {
            client.release();
          }
        })();
  await held;
  return {
    release: () => {
      releaseFirst();
      return first;
    },
  };
}

async function nothingStored(key: string, operation = 'transfer') {
  expect(await idem.get({ tenant: 'acme', operation, key })).toBeNull();
  expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(0);
}

describe('lock_timeout', () => {
  it('in the handler: OperationFailedError, retryable, SQLSTATE 55P03 as its cause; nothing stored; the retry runs once', async () => {
    const key = `lock-${randomUUID()}`;
    const lock = await holdAccountLock();
    const error = await transfer(key, { lockTimeout: '100ms' }).catch((e: unknown) => e);
    expect(isOperationFailed(error)).toBe(true);
    expect((error as { retryable: boolean }).retryable).toBe(true);
    expect(sqlStateOf((error as Error).cause)).toBe(SqlState.lockNotAvailable);
    await nothingStored(key);
    await lock.release();
    expect(await transfer(key, { lockTimeout: '100ms' })).toMatchObject({
      replayed: false,
      value: { moved: 10 },
    });
    expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
  });

  it.each(recordings)(
    "on idem's own wait for the key, recorded at %s (a concurrent execution holds it): InProgressError with Retry-After; the waiter stored nothing",
    async (recording) => {
      const key = `claim-${recording}-${randomUUID()}`;
      const holder = await holdKey(key, recording);
      const error = await transfer(key, { recording }).catch((e: unknown) => e);
      expect(isInProgress(error)).toBe(true);
      expect(isRetryable(error)).toBe(true);
      expect((error as { retryAfterMs: number }).retryAfterMs).toBeGreaterThan(0);
      await holder.release();
      // The retry after the first committed is its stored result, and there is one effect.
      expect(await transfer(key, { recording })).toMatchObject({ replayed: true, value: { moved: 10 } });
      expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
    },
  );
});

describe('statement_timeout', () => {
  it('in the handler: OperationFailedError, retryable, SQLSTATE 57014; nothing stored; the retry runs once', async () => {
    const key = `stmt-${randomUUID()}`;
    const error = await transfer(key, { statementTimeout: '100ms', sleep: 2 }).catch((e: unknown) => e);
    expect(isOperationFailed(error)).toBe(true);
    expect((error as { retryable: boolean }).retryable).toBe(true);
    expect(sqlStateOf((error as Error).cause)).toBe(SqlState.queryCanceled);
    await nothingStored(key);
    expect(await transfer(key)).toMatchObject({ replayed: false, value: { moved: 10 } });
    expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
  });

  it.each(recordings)(
    "set for every session (a role or pool setting) and hit by idem's own wait for the key, recorded at %s: retryable, nothing stored",
    async (recording) => {
      // statement_timeout shorter than idem's wait: the wait for the holder is cancelled.
      const short = new pg.Pool({
        connectionString: databaseUrl(),
        max: 2,
        options: '-c statement_timeout=150',
      });
      const impatient = createIdem({ sql: fromPg(short), schema: db.schema, waitMs: 5000, recording });
      try {
        const key = `role-${recording}-${randomUUID()}`;
        const holder = await holdKey(key, recording);
        const error = await impatient
          .run({ tenant: 'acme', operation: 'transfer', key, request: { amount: 10 } }, async () => ({
            moved: -1,
          }))
          .catch((e: unknown) => e);
        expect(isRetryable(error)).toBe(true);
        expect(isOperationFailed(error) || isInProgress(error)).toBe(true);
        await holder.release();
        expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
        expect(
          await impatient.run(
            { tenant: 'acme', operation: 'transfer', key, request: { amount: 10 } },
            async () => ({ moved: -1 }),
          ),
        ).toMatchObject({
          replayed: true,
          value: { moved: 10 },
        });
      } finally {
        await short.end();
      }
    },
  );

  it('in a multi-step operation: the step rolls back, the lease is released, the retry resumes at that step', async () => {
    const key = `steps-${randomUUID()}`;
    let attempt = 0;
    const run = () =>
      idem.steps({ tenant: 'acme', operation: 'steps-transfer', key, request: {} }, async (op) => {
        attempt++;
        const a = await op.step('first', async (tx) => {
          await tx.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, 1)`, [key]);
          return 'first done';
        });
        const b = await op.step('second', async (tx) => {
          await tx.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, 2)`, [`${key}:2`]);
          if (attempt === 1) {
            await tx.query(`SET LOCAL statement_timeout = '50ms'`);
            await tx.query('SELECT pg_sleep(1)');
          }
          return 'second done';
        });
        return [a, b];
      });
    const error = await run().catch((e: unknown) => e);
    expect(isOperationFailed(error)).toBe(true);
    expect(isRetryable(error)).toBe(true);
    expect((await effectsOf(db.pool, db.schema, [key, `${key}:2`])).get(`${key}:2`)).toBe(0);
    expect(await run()).toMatchObject({ replayed: false, value: ['first done', 'second done'] });
    const effects = await effectsOf(db.pool, db.schema, [key, `${key}:2`]);
    expect([effects.get(key), effects.get(`${key}:2`)]).toEqual([1, 1]);
  });
});
