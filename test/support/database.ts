import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { fromPg } from 'idem/pg';
import { migrate } from 'idem';

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

/** Drops `schema` (unless `keepSchema`), then ends the connection. */
export async function dropAndEnd(
  schema: string,
  end: () => Promise<unknown>,
  query: (q: string) => PromiseLike<unknown>,
  options: { keepSchema?: boolean } = {},
) {
  if (!options.keepSchema) await query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await end();
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
