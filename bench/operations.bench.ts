/**
 * Keyed operations: an operation that inserts one business row, with idem and without, at
 * concurrency 1 and 32; replays against the same baseline; and the SQL ceiling — the same
 * statements idem sends, issued raw on the same pool.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { fromPg } from '../src/adapters/pg.js';
import type { Queryable } from '../src/core/sql.js';
import { migrate } from '../src/migrate/migrate.js';
import { createIdem } from '../src/operations/idem.js';
import { renderStatements } from '../src/operations/statements.js';
import { closedLoop, round, sideBySide, type LoadResult } from './lib/measure.js';
import type { BenchContext, BenchFigure, BenchSection } from './lib/types.js';

export default async function operationsBench(ctx: BenchContext): Promise<BenchSection> {
  const schema = `idem_bench_ops_${randomBytes(3).toString('hex')}`;
  const pool = new pg.Pool({ connectionString: ctx.databaseUrl, max: 34 });
  const sql = fromPg(pool);
  await migrate(sql, { schema });
  await pool.query(
    `CREATE TABLE "${schema}".items (id bigserial PRIMARY KEY, tenant text NOT NULL, amount int NOT NULL)`,
  );
  const idem = createIdem({ sql, schema });
  const statements = renderStatements(schema);
  const insertItem = `INSERT INTO "${schema}".items (tenant, amount) VALUES ($1, $2) RETURNING id`;
  const seconds = ctx.quick ? 3 : 10;
  const rounds = ctx.quick ? 1 : 3;
  const run = `r${randomBytes(3).toString('hex')}`;

  const plain = (c: number) =>
    closedLoop(c, seconds * 1000, () =>
      sql.transaction(async (tx) => (await tx.query(insertItem, ['acme', 1])).rows[0]),
    );
  const withIdem = (c: number, label: string) =>
    closedLoop(c, seconds * 1000, (w, i) =>
      idem.run(
        {
          tenant: 'acme',
          operation: 'create-item',
          key: `${run}-${label}-${c}-${w}-${i}`,
          request: { amount: 1 },
        },
        async (tx) => {
          return (await tx.query(insertItem, ['acme', 1])).rows[0];
        },
      ),
    );
  // The same round trips idem makes for a first execution, with no library code around them:
  // the same statement texts, prepared under the same names, on the same pool.
  const ceiling = (c: number, label: string) =>
    closedLoop(c, seconds * 1000, async (w, i) => {
      const key = `${run}-ceil-${label}-${c}-${w}-${i}`;
      const now = Date.now();
      const scope = ['acme', 'create-item', key];
      await pool.query({ ...statements.names.read, text: statements.read, values: scope });
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query({
          ...statements.names.claim,
          text: statements.claim,
          values: [...scope, 'f', null, new Date(now), new Date(now + 1e9), new Date(now + 1e9), '5000ms'],
        });
        const row = (await client.query(insertItem, ['acme', 1])).rows[0] as unknown;
        await client.query({
          ...statements.names.complete,
          text: statements.complete,
          values: [...scope, 1, 'completed', JSON.stringify(row), null, null, null, new Date(now)],
        });
        await client.query('COMMIT');
      } finally {
        client.release();
      }
    });

  // The least any design must do to commit a dedupe record with the business write: the read
  // that answers replays, and one more row in the same transaction (no claim before the handler,
  // so no bounded wait for concurrent duplicates, which idem needs). Measures the structural cost.
  const floor = (c: number, label: string) =>
    closedLoop(c, seconds * 1000, async (w, i) => {
      const key = `${run}-floor-${label}-${c}-${w}-${i}`;
      const now = Date.now();
      const scope = ['acme', 'create-item', key];
      await pool.query({ name: `floor_read_${schema}`, text: statements.read, values: scope });
      await sql.transaction(async (tx) => {
        const row = (await tx.query(insertItem, ['acme', 1])).rows[0];
        await tx.query(
          `INSERT INTO "${schema}".requests (tenant_id, operation, idempotency_key, fingerprint, state, fence, result, created_at, completed_at, expires_at, tombstone_until)
           VALUES ($1, $2, $3, 'f', 'completed', 1, $4, $5, $5, $6, $6) ON CONFLICT DO NOTHING`,
          [...scope, JSON.stringify(row), new Date(now), new Date(now + 1e9)],
          { name: `floor_insert_${schema}` },
        );
      });
    });

  // A handler closer to a real one: record a payment, its outbox event, and move a balance.
  await pool.query(
    `CREATE TABLE "${schema}".events (id bigserial PRIMARY KEY, payload jsonb NOT NULL);
     CREATE TABLE "${schema}".balances (account int PRIMARY KEY, total bigint NOT NULL);
     INSERT INTO "${schema}".balances SELECT g, 0 FROM generate_series(0, 999) g`,
  );
  const threeWrites = async (tx: Queryable, w: number) => {
    const id = (await tx.query<{ id: string }>(insertItem, ['acme', 1])).rows[0]!;
    await tx.query(`INSERT INTO "${schema}".events (payload) VALUES ($1)`, [JSON.stringify({ item: id.id })]);
    await tx.query(`UPDATE "${schema}".balances SET total = total + 1 WHERE account = $1`, [(w * 31) % 1000]);
    return id;
  };
  const plainThree = (c: number) =>
    closedLoop(c, seconds * 1000, (w) => sql.transaction((tx) => threeWrites(tx, w)));
  const idemThree = (c: number) =>
    closedLoop(c, seconds * 1000, (w, i) =>
      idem.run(
        {
          tenant: 'acme',
          operation: 'create-item',
          key: `${run}-three-${c}-${w}-${i}`,
          request: { amount: 1 },
        },
        (tx) => threeWrites(tx, w),
      ),
    );

  const figures: BenchFigure[] = [];
  const add = (name: string, value: LoadResult, base: LoadResult, baseName: string, target?: number) => {
    const ratio = value.opsPerSecond / base.opsPerSecond;
    figures.push({
      name,
      value: round(value.opsPerSecond, 0),
      unit: 'ops/s',
      baseline: { name: baseName, value: round(base.opsPerSecond, 0) },
      ratio: round(ratio),
      higherIsBetter: true,
      ...(target !== undefined
        ? { target: { ratio: target, description: `≥ ${target}× ${baseName}` }, holds: ratio >= target }
        : {}),
    });
    ctx.log(
      `  ${name}: ${round(value.opsPerSecond, 0)} ops/s vs ${round(base.opsPerSecond, 0)} (${round(ratio)}×), p99 ${round(value.p99Ms)} ms vs ${round(base.p99Ms)} ms`,
    );
  };

  for (const c of [1, 32]) {
    ctx.log(`operations: first executions at concurrency ${c}`);
    const [p, i] = await sideBySide(
      rounds,
      () => plain(c),
      () => withIdem(c, 'first'),
    );
    add(`first execution, c=${c}`, i, p, 'plain transaction', c === 32 ? 0.7 : undefined);
    if (c === 32) {
      const [ceil, i2] = await sideBySide(
        rounds,
        () => ceiling(c, 'x'),
        () => withIdem(c, 'first2'),
      );
      add(`first execution vs SQL ceiling, c=${c}`, i2, ceil, 'same statements, raw', 0.8);
      ctx.log('operations: the floor of same-transaction dedupe, and a three-write handler');
      const [p3, fl] = await sideBySide(
        rounds,
        () => plain(c),
        () => floor(c, 'f'),
      );
      add(`floor: read + business write + key record, c=${c}`, fl, p3, 'plain transaction');
      const [pt, it] = await sideBySide(
        rounds,
        () => plainThree(c),
        () => idemThree(c),
      );
      add(`first execution, three-write handler, c=${c}`, it, pt, 'plain transaction, same handler');
    }
  }

  // Replays: 1000 finished keys, read back in a loop.
  const replayKeys = 1000;
  for (let k = 0; k < replayKeys; k++) {
    await idem.run(
      { tenant: 'acme', operation: 'create-item', key: `${run}-replay-${k}`, request: { amount: 1 } },
      async (tx) => (await tx.query(insertItem, ['acme', 1])).rows[0],
    );
  }
  for (const c of [1, 32]) {
    ctx.log(`operations: replays at concurrency ${c}`);
    const replay = () =>
      closedLoop(c, seconds * 1000, (_w, i) =>
        idem.run(
          {
            tenant: 'acme',
            operation: 'create-item',
            key: `${run}-replay-${i % replayKeys}`,
            request: { amount: 1 },
          },
          async () => {
            throw new Error('a replay must not run the handler');
          },
        ),
      );
    const [p, r] = await sideBySide(rounds, () => plain(c), replay);
    add(`replay, c=${c}`, r, p, 'plain transaction', c === 32 ? 1.5 : undefined);
  }

  const settings = await pool.query<{ name: string; setting: string }>(
    `SELECT name, setting FROM pg_settings WHERE name IN ('synchronous_commit', 'fsync', 'max_connections', 'shared_buffers')`,
  );
  await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  await pool.end();
  return {
    name: 'Keyed operations',
    figures,
    notes: [
      `Each figure is the median of ${rounds} alternating run(s) of ${seconds} s; pool of 34 connections; PostgreSQL settings: ${settings.rows.map((r) => `${r.name}=${r.setting}`).join(', ')}.`,
      'A first execution sends: an indexed read (fast replay path), BEGIN, the claim (INSERT … ON CONFLICT DO NOTHING with a statement-scoped lock_timeout), the handler’s INSERT, the completing UPDATE, COMMIT — 6 round trips against the plain transaction’s 3.',
      'A replay sends one indexed read and no transaction.',
      'Why the 0.7× first-execution target misses with a one-INSERT handler: the “floor” figure is the least any design that commits its dedupe record with the business write must do — the read that answers replays and one more row in the same transaction, with no claim before the handler (so without the bounded wait for concurrent duplicates that idem gives). On this machine each statement costs about as much as the one-row INSERT itself (PostgreSQL and the driver share the 2 cores), so even that floor stays near half of the plain transaction. Fewer round trips do not close the gap, because the cost is per statement, not per wait: sending BEGIN with the claim and the completion with COMMIT in one round trip each measured +8–15 % as simple-protocol strings (re-planned every time) and +5–20 % with node-postgres 8.23’s pipeline mode (prepared statements kept), both at c=32 on this machine, side by side with the current path (3 alternating rounds of 4 s) — short of the ×1.9 needed, so idem keeps the simpler path.',
      'The three-write handler (a payment row, an outbox event, a balance update) shows how the fixed cost of the claim and the completion shrinks beside a handler that does real work.',
    ],
  };
}
