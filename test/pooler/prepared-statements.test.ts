/**
 * Named prepared statements and transaction-mode poolers. Through a real PgBouncer (transaction
 * mode, its own instance) the pg adapter's named statements fail the way the issue saw (42P05 /
 * 26000); that failure must be one typed, retryable error naming the setting, after which `fromPg`
 * stops naming statements; a multi-step operation cut by it must be completed by a retry; and
 * migrations and postgres.js must work through the pooler.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { fromPostgresJs } from 'idem/postgres';
import {
  createIdem,
  isPreparedStatementsUnsupported,
  migrate,
  type PreparedStatementsUnsupportedError,
  sqlStateOf,
} from 'idem';
import { createOutbox } from 'idem/outbox';
import { databaseUrl } from '../support/database.js';
import { requirePgBouncer, startPgBouncer, type PgBouncer } from '../support/pgbouncer.js';
import { turnedOffEvents } from '../support/events.js';

const binary = requirePgBouncer();

describe.skipIf(!binary)('named prepared statements behind PgBouncer in transaction mode', () => {
  let bouncer: PgBouncer;
  const schema = `idem_ps_${randomBytes(3).toString('hex')}`;
  let direct: pg.Pool;

  beforeAll(async () => {
    // Two server connections for eight clients: each transaction lands on whichever is free.
    bouncer = await startPgBouncer(binary!, { targetUrl: databaseUrl(), poolSize: 2 });
    direct = new pg.Pool({ connectionString: databaseUrl(), max: 2 });
    await migrate(fromPg(direct), { schema });
    await direct.query(
      `CREATE TABLE "${schema}".effects (id serial PRIMARY KEY, intent text NOT NULL UNIQUE)`,
    );
  });
  afterAll(async () => {
    await direct?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await direct?.end();
    await bouncer?.stop();
  });

  const effects = async (prefix: string) =>
    Number(
      (
        await direct.query<{ n: string }>(
          `SELECT count(*) AS n FROM "${schema}".effects WHERE intent LIKE $1`,
          [`${prefix}%`],
        )
      ).rows[0]!.n,
    );

  it('left on, the first refusal is one typed retryable error naming the setting; then statements go unnamed and every key completes once', async () => {
    const pool = new pg.Pool({ connectionString: bouncer.url, max: 8 });
    const turnedOff: PreparedStatementsUnsupportedError[] = [];
    const sql = fromPg(pool, { events: turnedOffEvents(turnedOff) });
    const idem = createIdem({ sql, schema });
    const prefix = `left-on-${randomBytes(3).toString('hex')}-`;
    const runKey = (key: string) =>
      idem.run({ tenant: 'acme', operation: 'create', key, request: { key } }, async (tx) => {
        await tx.query(`INSERT INTO "${schema}".effects (intent) VALUES ($1)`, [key]);
        return key;
      });
    try {
      const keys = Array.from({ length: 64 }, (_, i) => `${prefix}${i}`);
      const first = await Promise.allSettled(keys.map(runKey));
      const refusals = first.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
      // Whatever failed, failed with the typed error, retryable, naming the setting.
      for (const refusal of refusals) {
        expect(isPreparedStatementsUnsupported(refusal), String(refusal)).toBe(true);
        expect((refusal as PreparedStatementsUnsupportedError).retryable).toBe(true);
      }
      expect(turnedOff).toHaveLength(1);
      const [error] = turnedOff;
      expect(['42P05', '26000']).toContain(sqlStateOf(error!.cause));
      expect(error!.code).toBe('IDEM_PREPARED_STATEMENTS_UNSUPPORTED');
      expect(error!.message).toContain('prepare: false');
      expect(error!.message).toContain('IDEM_PREPARE=false');

      // A retry of every key completes it; no key ran twice.
      await Promise.all(keys.map(runKey));
      expect(await effects(prefix)).toBe(keys.length);
      // From now on nothing is named: another burst through the pooler has no refusal at all.
      const more = Array.from({ length: 64 }, (_, i) => `${prefix}more-${i}`);
      await Promise.all(more.map(runKey));
      expect(await effects(prefix)).toBe(keys.length + more.length);
      expect(turnedOff).toHaveLength(1);
    } finally {
      await pool.end();
    }
  });

  it('with prepare: false there is no refusal at all under the same load', async () => {
    const pool = new pg.Pool({ connectionString: bouncer.url, max: 8 });
    const turnedOff: unknown[] = [];
    const sql = fromPg(pool, { prepare: false, events: turnedOffEvents(turnedOff) });
    const idem = createIdem({ sql, schema });
    const outbox = createOutbox({ sql, schema });
    const prefix = `off-${randomBytes(3).toString('hex')}-`;
    try {
      const keys = Array.from({ length: 128 }, (_, i) => `${prefix}${i}`);
      await Promise.all(
        keys.map((key) =>
          idem.run({ tenant: 'acme', operation: 'create', key, request: { key } }, async (tx) => {
            await tx.query(`INSERT INTO "${schema}".effects (intent) VALUES ($1)`, [key]);
            await outbox.add(tx, { topic: 'effects', key, type: 'effect.created', payload: { key } });
            return key;
          }),
        ),
      );
      expect(await effects(prefix)).toBe(keys.length);
      expect(turnedOff).toEqual([]);
    } finally {
      await pool.end();
    }
  });

  it('migrates through the pooler, also from two processes at once', async () => {
    const fresh = `idem_psm_${randomBytes(3).toString('hex')}`;
    const pools = [0, 1].map(() => new pg.Pool({ connectionString: bouncer.url, max: 2 }));
    try {
      await Promise.all(pools.map((pool) => migrate(fromPg(pool, { prepare: false }), { schema: fresh })));
      const { rows } = await direct.query<{ n: string }>(
        `SELECT count(*) AS n FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('requests', 'outbox', 'inbox')`,
        [fresh],
      );
      expect(Number(rows[0]!.n)).toBe(3);
    } finally {
      await Promise.all(pools.map((pool) => pool.end()));
      await direct.query(`DROP SCHEMA IF EXISTS "${fresh}" CASCADE`);
    }
  });

  it('postgres.js with the connection’s prepare: false (what postgres.js asks behind such a pooler) runs idem through it', async () => {
    const db = postgres(bouncer.url, { max: 8, prepare: false, onnotice: () => {} });
    const idem = createIdem({ sql: fromPostgresJs(db), schema });
    const prefix = `pgjs-${randomBytes(3).toString('hex')}-`;
    try {
      const keys = Array.from({ length: 64 }, (_, i) => `${prefix}${i}`);
      const run = (key: string) =>
        idem.run({ tenant: 'acme', operation: 'create', key, request: { key } }, async (tx) => {
          await tx.query(`INSERT INTO "${schema}".effects (intent) VALUES ($1)`, [key]);
          return key;
        });
      await Promise.all(keys.map(run));
      const replays = await Promise.all(keys.map(run));
      expect(replays.every((r) => r.replayed)).toBe(true);
      expect(await effects(prefix)).toBe(keys.length);
    } finally {
      await db.end();
    }
  });
});

describe('a step cut by a prepared-statement refusal', () => {
  const schema = `idem_psr_${randomBytes(3).toString('hex')}`;
  let pool: pg.Pool;

  beforeAll(async () => {
    // One connection, so the statement the test deallocates is the one the step will use.
    pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
    await migrate(fromPg(pool), { schema });
    await pool.query(
      `CREATE TABLE "${schema}".payments (id text PRIMARY KEY, status text NOT NULL, charge text)`,
    );
  });
  afterAll(async () => {
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });

  it('leaves the operation resumable, and the retry completes it with each effect once', async () => {
    const turnedOff: unknown[] = [];
    const sql = fromPg(pool, { events: turnedOffEvents(turnedOff) });
    const idem = createIdem({ sql, schema, leaseMs: 60_000 });
    const outbox = createOutbox({ sql, schema });
    // The outbox's insert is prepared on the connection, as after any earlier payment.
    await sql.transaction((tx) => outbox.add(tx, { topic: 'warm', key: 'k', type: 'warm', payload: {} }));
    const charges = new Map<string, number>(); // a provider that dedupes on the derived key
    let pullTheRug = true;
    const spec = {
      tenant: 'acme',
      operation: 'pay',
      key: `pay-${randomBytes(3).toString('hex')}`,
      request: {},
    };
    const pay = () =>
      idem.steps(spec, async (op) => {
        const payment = await op.step('record-payment', async (tx) => {
          await tx.query(`INSERT INTO "${schema}".payments (id, status) VALUES ($1, 'pending')`, [spec.key]);
          return { id: spec.key };
        });
        const charge = await op.step('charge', async (_tx, { key }) => {
          charges.set(key, (charges.get(key) ?? 0) + 1);
          return { chargeId: `ch_${key.slice(0, 8)}` };
        });
        return op.step('record-charge', async (tx) => {
          await tx.query(`UPDATE "${schema}".payments SET status = 'succeeded', charge = $2 WHERE id = $1`, [
            payment.id,
            charge.chargeId,
          ]);
          // What a transaction-mode pooler does to this connection between two transactions: the
          // server connection under it no longer has the statement pg prepared there.
          if (pullTheRug) await tx.query('DEALLOCATE ALL');
          pullTheRug = false;
          await outbox.add(tx, { topic: 'payments', key: payment.id, type: 'payment.created', payload: {} });
          return 'paid';
        });
      });

    const failure = await pay().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isPreparedStatementsUnsupported(failure), String(failure)).toBe(true);
    expect((failure as PreparedStatementsUnsupportedError).retryable).toBe(true);
    expect(sqlStateOf((failure as Error).cause)).toBe('26000');
    expect(turnedOff).toHaveLength(1);
    // Nothing of the cut step remains; the steps before it are recorded; the lease is released.
    const state = await pool.query<{ state: string; released: boolean; steps: string[] }>(
      `SELECT r.state, r.locked_until <= now() AS released,
              ARRAY(SELECT step FROM "${schema}".steps s WHERE s.tenant_id = r.tenant_id AND s.operation = r.operation
                    AND s.idempotency_key = r.idempotency_key ORDER BY step) AS steps
         FROM "${schema}".requests r WHERE r.idempotency_key = $1`,
      [spec.key],
    );
    expect(state.rows[0]).toEqual({ state: 'pending', released: true, steps: ['charge', 'record-payment'] });
    const payment = await pool.query(`SELECT status FROM "${schema}".payments`);
    expect(payment.rows).toEqual([{ status: 'pending' }]);

    // The retry takes over at once, skips the recorded steps and completes.
    const retried = await pay();
    expect(retried).toMatchObject({ value: 'paid', replayed: false });
    expect([...charges.values()]).toEqual([1]);
    const events = await pool.query(
      `SELECT count(*)::int AS n FROM "${schema}".outbox WHERE aggregatetype = 'payments'`,
    );
    expect(events.rows).toEqual([{ n: 1 }]);
    expect((await pool.query(`SELECT status FROM "${schema}".payments`)).rows).toEqual([
      { status: 'succeeded' },
    ]);
    expect(await pay()).toMatchObject({ value: 'paid', replayed: true });
  });
});
