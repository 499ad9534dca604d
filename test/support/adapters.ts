import { PGlite } from '@electric-sql/pglite';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { fromDrizzle, fromDrizzleTransaction } from 'idem/drizzle';
import { fromKysely, fromKyselyTransaction } from 'idem/kysely';
import { fromPg, fromPgClient } from 'idem/pg';
import { fromPglite, fromPgliteTransaction } from 'idem/pglite';
import { fromPostgresJs, fromPostgresJsTransaction } from 'idem/postgres';
import { migrate, type Sql, type Transaction } from 'idem';
import { inject } from 'vitest';
import { databaseUrl, dropAndEnd, effectsTable } from './database.js';
import { requirePgBouncer } from './pgbouncer.js';
import { knexFactory, mikroOrmFactory, prismaFactory, typeormFactory } from './orm-adapters.js';

/** One driver, connected, with idem's tables in `schema`. */
export interface AdapterUnderTest<Client = unknown> {
  name: string;
  sql: Sql<Client>;
  /** Opens the caller's own transaction the driver's way and hands idem a `Transaction` on it. */
  userTransaction<T>(fn: (tx: Transaction<Client>) => Promise<T>): Promise<T>;
  /** True when the driver can hold several connections (concurrency tests apply). */
  concurrent: boolean;
  /** Drops `schema` (unless `keepSchema`) and disconnects. */
  close(options?: { keepSchema?: boolean }): Promise<void>;
}

export interface AdapterFactory<Client = unknown> {
  name: string;
  /** Connects to `url` (default: the test database); `schema` is the one the tests use. */
  create(schema: string, url?: string): Promise<AdapterUnderTest<Client>>;
}

export { knexFactory, mikroOrmFactory, prismaFactory, typeormFactory };

/**
 * node-postgres on `url`; `prepare` as the adapter's option; `pipeline` as the pool's (BEGIN and
 * COMMIT then go out with idem's statements, src/adapters/pg-pipeline.ts).
 */
function pgFactory(name: string, url: () => string, prepare: boolean, pipeline = false): AdapterFactory {
  return {
    name,
    async create(schema, target) {
      const pool = new pg.Pool({ connectionString: target ?? url(), max: 10, pipeline });
      return {
        name,
        sql: fromPg(pool, { prepare }),
        concurrent: true,
        async userTransaction(fn) {
          const client = await pool.connect();
          try {
            await client.query('BEGIN');
            const value = await fn(fromPgClient(client, { prepare }));
            await client.query('COMMIT');
            return value;
          } catch (error) {
            await client.query('ROLLBACK');
            throw error;
          } finally {
            client.release();
          }
        },
        close: dropAndEnd(schema, pool),
      };
    },
  };
}

/**
 * The core contract suite once more through PgBouncer in transaction mode, what managed PostgreSQL
 * puts in front of applications, with named statements off as docs/operations/deployment.md says. Locally
 * without pgbouncer it is skipped loudly; under CI=true its absence fails the files that use it.
 */
function pgBouncerFactories(): AdapterFactory[] {
  if (inject('pgbouncerUrl')) return [pgFactory('pg via pgbouncer', () => inject('pgbouncerUrl'), false)];
  requirePgBouncer(); // throws under CI, warns otherwise
  return [];
}

export const adapterFactories: AdapterFactory[] = [
  pgFactory('pg', databaseUrl, true),
  pgFactory('pg (pipeline mode)', databaseUrl, true, true),
  ...pgBouncerFactories(),
  {
    name: 'postgres.js',
    async create(schema) {
      const sql = postgres(databaseUrl(), { max: 10, onnotice: () => {} });
      return {
        name: 'postgres.js',
        sql: fromPostgresJs(sql),
        concurrent: true,
        userTransaction: (fn) => sql.begin((tx) => fn(fromPostgresJsTransaction(tx))) as Promise<never>,
        close: dropAndEnd(schema, { query: (q) => sql.unsafe(q), end: () => sql.end() }),
      };
    },
  },
  {
    name: 'kysely',
    async create(schema) {
      const db = new Kysely<unknown>({
        dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: databaseUrl(), max: 10 }) }),
      });
      const sql = fromKysely(db);
      return {
        name: 'kysely',
        sql,
        concurrent: true,
        userTransaction: (fn) => db.transaction().execute((trx) => fn(fromKyselyTransaction(trx))),
        close: dropAndEnd(schema, { query: (q) => sql.query(q), end: () => db.destroy() }),
      };
    },
  },
  {
    name: 'drizzle',
    async create(schema) {
      const pool = new pg.Pool({ connectionString: databaseUrl(), max: 10 });
      const db = drizzle(pool);
      return {
        name: 'drizzle',
        sql: fromDrizzle(db),
        concurrent: true,
        userTransaction: (fn) => db.transaction((tx) => fn(fromDrizzleTransaction(tx))),
        close: dropAndEnd(schema, pool),
      };
    },
  },
  prismaFactory,
  typeormFactory,
  knexFactory,
  mikroOrmFactory,
  {
    name: 'pglite',
    async create() {
      const db = new PGlite();
      return {
        name: 'pglite',
        sql: fromPglite(db),
        concurrent: false,
        userTransaction: (fn) => db.transaction((tx) => fn(fromPgliteTransaction(tx))),
        close: () => db.close(),
      };
    },
  },
];

/** Creates the adapter, migrates idem's tables and a business table `effects` into `schema`. */
export async function prepareAdapter(factory: AdapterFactory, schema: string): Promise<AdapterUnderTest> {
  const adapter = await factory.create(schema);
  await migrate(adapter.sql, { schema });
  await adapter.sql.query(effectsTable(schema));
  return adapter;
}
