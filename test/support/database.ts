import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { fromPg } from 'idem/pg';
import { migrate, migrations, quoteSchema } from 'idem';
import { afterAll, beforeAll, inject } from 'vitest';

export const databaseUrl = (): string => inject('databaseUrl');

/** A fresh schema with idem's tables, on a real PostgreSQL, dropped by `close`. */
export interface TestSchema {
  pool: pg.Pool;
  schema: string;
  close(): Promise<void>;
}

export async function createTestSchema(options: { poolSize?: number } = {}): Promise<TestSchema> {
  const schema = `idem_test_${randomBytes(5).toString('hex')}`;
  const pool = new pg.Pool({ connectionString: databaseUrl(), max: options.poolSize ?? 10 });
  await migrate(fromPg(pool), { schema });
  return {
    pool,
    schema,
    async close() {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

/** What `dropAndEnd` needs of a driver: a pg `Pool` is one as it is; an ORM, two arrows. */
export interface DroppableClient {
  query(q: string): PromiseLike<unknown>;
  end(): Promise<unknown>;
}

/**
 * An adapter's `close`: drops `schema` (unless `keepSchema`) with `client.query`, then ends the
 * connection with `client.end`.
 */
export function dropAndEnd(
  schema: string,
  client: DroppableClient,
): (options?: { keepSchema?: boolean }) => Promise<void> {
  return async (options = {}) => {
    if (!options.keepSchema) await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
  };
}

/** The business table `effects` (tenant, intent, payload) the operations and adapter tests write. */
export const effectsTable = (schema: string) =>
  `CREATE TABLE "${schema}".effects (id serial PRIMARY KEY, tenant text NOT NULL, intent text NOT NULL, payload jsonb)`;

/** A test schema with `effectsTable` in it. */
export async function createEffectsSchema(): Promise<TestSchema> {
  const db = await createTestSchema();
  await db.pool.query(effectsTable(db.schema));
  return db;
}

/** Anything that runs a query and answers rows: idem's `Sql` and transactions, a `pg.Pool`. */
export interface RowSource {
  query(text: string, params: unknown[]): PromiseLike<{ rows: unknown[] }>;
}

/** The `n` a `SELECT count(*)::int AS n …` answers: `text` run with `params` on `db`. */
export async function countRows(db: RowSource, text: string, params: unknown[] = []): Promise<number> {
  const { rows } = await db.query(text, params);
  return Number((rows[0] as { n: number | string }).n);
}

/**
 * For a suite on rows an older release wrote: registers hooks that lay out a schema as that release
 * left it (every migration before `version`, applied and recorded as migrate() did) before all
 * tests and drop it after all. `s` is the schema's quoted name; `pool` is set once the suite runs.
 */
export function schemaBefore(version: number): { schema: string; s: string; pool: pg.Pool } {
  const schema = `idem_t${String(version).padStart(4, '0')}_${randomBytes(4).toString('hex')}`;
  const s = quoteSchema(schema);
  const old = { schema, s, pool: undefined as unknown as pg.Pool };
  beforeAll(async () => {
    const pool = (old.pool = new pg.Pool({ connectionString: databaseUrl(), max: 4 }));
    await pool.query(`CREATE SCHEMA ${s}`);
    await pool.query(`CREATE TABLE ${s}.migrations (version integer PRIMARY KEY, name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now())`);
    for (const m of migrations(schema).filter((m) => m.version < version)) {
      await pool.query(m.sql);
      await pool.query(`INSERT INTO ${s}.migrations (version, name) VALUES ($1, $2)`, [m.version, m.name]);
    }
  });
  afterAll(() => dropAndEnd(schema, old.pool)());
  return old;
}

/** A test schema for a CLI test, with DATABASE_URL pointed at the test database as the CLI reads it. */
export function cliTestSchema(): Promise<TestSchema> {
  process.env.DATABASE_URL = databaseUrl();
  return createTestSchema();
}
