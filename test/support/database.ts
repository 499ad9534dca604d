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
