import { PGlite } from '@electric-sql/pglite';
import { MikroORM } from '@mikro-orm/postgresql';
import { PrismaPg } from '@prisma/adapter-pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import knex from 'knex';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { DataSource } from 'typeorm';
import { fromDrizzle, fromDrizzleTransaction } from '../../src/adapters/drizzle.js';
import { fromKnex, fromKnexTransaction } from '../../src/adapters/knex.js';
import { fromKysely, fromKyselyTransaction } from '../../src/adapters/kysely.js';
import { fromPg, fromPgClient } from '../../src/adapters/pg.js';
import { fromPglite, fromPgliteTransaction } from '../../src/adapters/pglite.js';
import { fromPostgresJs, fromPostgresJsTransaction } from '../../src/adapters/postgres.js';
import { fromPrisma, fromPrismaTransaction } from '../../src/adapters/prisma.js';
import { fromTypeORM, fromTypeORMTransaction } from '../../src/adapters/typeorm.js';
import type { Sql, Transaction } from '../../src/core/sql.js';
import { migrate } from '../../src/migrate/migrate.js';
import { databaseUrl } from './database.js';
import { ormEntities } from './orm-entities.js';
import { PrismaClient, type Prisma } from './prisma/generated/index.js';

/** One driver, connected, with idem's tables in `schema`. */
export interface AdapterUnderTest<Client = unknown> {
  name: string;
  sql: Sql<Client>;
  /** Opens the caller's own transaction the driver's way and hands idem a `Transaction` on it. */
  userTransaction<T>(fn: (tx: Transaction<Client>) => Promise<T>): Promise<T>;
  /** True when the driver can hold several connections (concurrency tests apply). */
  concurrent: boolean;
  close(): Promise<void>;
}

export interface AdapterFactory<Client = unknown> {
  name: string;
  create(schema: string): Promise<AdapterUnderTest<Client>>;
}

/** Prisma 7 on @prisma/adapter-pg; model queries go to `schema` through PrismaPg's `schema` option. */
export const prismaFactory: AdapterFactory<Prisma.TransactionClient> = {
  name: 'prisma',
  async create(schema) {
    const prisma = new PrismaClient({
      adapter: new PrismaPg({ connectionString: databaseUrl(), max: 10 }, { schema }),
    });
    return {
      name: 'prisma',
      sql: fromPrisma(prisma),
      concurrent: true,
      userTransaction: (fn) => prisma.$transaction((tx) => fn(fromPrismaTransaction(tx))),
      close: () =>
        dropAndEnd(
          schema,
          () => prisma.$disconnect(),
          (q) => prisma.$executeRawUnsafe(q),
        ),
    };
  },
};

/** TypeORM 1 with the entities of the ORM tests, in `schema`. */
export const typeormFactory: AdapterFactory<import('typeorm').EntityManager> = {
  name: 'typeorm',
  async create(schema) {
    const dataSource = new DataSource({
      type: 'postgres',
      url: databaseUrl(),
      schema,
      poolSize: 10,
      entities: ormEntities.typeorm.all,
    });
    await dataSource.initialize();
    return {
      name: 'typeorm',
      sql: fromTypeORM(dataSource),
      concurrent: true,
      userTransaction: (fn) => dataSource.transaction((manager) => fn(fromTypeORMTransaction(manager))),
      close: () =>
        dropAndEnd(
          schema,
          () => dataSource.destroy(),
          (q) => dataSource.query(q),
        ),
    };
  },
};

/** Knex 3 on pg, with `schema` first on the search path for the query builder. */
export const knexFactory: AdapterFactory<import('knex').Knex.Transaction> = {
  name: 'knex',
  async create(schema) {
    const db = knex({ client: 'pg', connection: databaseUrl(), searchPath: [schema], pool: { min: 0, max: 10 } });
    return {
      name: 'knex',
      sql: fromKnex(db),
      concurrent: true,
      userTransaction: (fn) => db.transaction((trx) => fn(fromKnexTransaction(trx))),
      close: () =>
        dropAndEnd(
          schema,
          () => db.destroy(),
          (q) => db.raw(q),
        ),
    };
  },
};

/**
 * MikroORM 6 through the Knex adapter: its transactions are Knex transactions (of the Knex copy
 * MikroORM depends on, 3.2 today).
 */
export const mikroOrmFactory: AdapterFactory<ReturnType<MikroORM['em']['getKnex']>> = {
  name: 'mikro-orm',
  async create(schema) {
    const orm = await MikroORM.init({
      clientUrl: databaseUrl(),
      schema,
      entities: ormEntities.mikroOrm.all,
      pool: { min: 0, max: 10 },
      allowGlobalContext: true,
    });
    const db = orm.em.getKnex();
    return {
      name: 'mikro-orm',
      sql: fromKnex(db),
      concurrent: true,
      userTransaction: (fn) =>
        orm.em.fork().transactional((em) => fn(fromKnexTransaction(em.getTransactionContext()!))),
      close: () =>
        dropAndEnd(
          schema,
          () => orm.close(),
          (q) => db.raw(q),
        ),
    };
  },
};

export const adapterFactories: AdapterFactory[] = [
  {
    name: 'pg',
    async create(schema) {
      const pool = new pg.Pool({ connectionString: databaseUrl(), max: 10 });
      return {
        name: 'pg',
        sql: fromPg(pool),
        concurrent: true,
        async userTransaction(fn) {
          const client = await pool.connect();
          try {
            await client.query('BEGIN');
            const value = await fn(fromPgClient(client));
            await client.query('COMMIT');
            return value;
          } catch (error) {
            await client.query('ROLLBACK');
            throw error;
          } finally {
            client.release();
          }
        },
        close: () =>
          dropAndEnd(
            schema,
            () => pool.end(),
            (q) => pool.query(q),
          ),
      };
    },
  },
  {
    name: 'postgres.js',
    async create(schema) {
      const sql = postgres(databaseUrl(), { max: 10, onnotice: () => {} });
      return {
        name: 'postgres.js',
        sql: fromPostgresJs(sql),
        concurrent: true,
        userTransaction: (fn) => sql.begin((tx) => fn(fromPostgresJsTransaction(tx))) as Promise<never>,
        close: () =>
          dropAndEnd(
            schema,
            () => sql.end(),
            (q) => sql.unsafe(q),
          ),
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
        close: () =>
          dropAndEnd(
            schema,
            () => db.destroy(),
            (q) => sql.query(q),
          ),
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
        close: () =>
          dropAndEnd(
            schema,
            () => pool.end(),
            (q) => pool.query(q),
          ),
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

async function dropAndEnd(
  schema: string,
  end: () => Promise<unknown>,
  query: (q: string) => PromiseLike<unknown>,
) {
  await query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await end();
}

/** Creates the adapter, migrates idem's tables and a business table `effects` into `schema`. */
export async function prepareAdapter(factory: AdapterFactory, schema: string): Promise<AdapterUnderTest> {
  const adapter = await factory.create(schema);
  await migrate(adapter.sql, { schema });
  await adapter.sql.query(
    `CREATE TABLE "${schema}".effects (id serial PRIMARY KEY, tenant text NOT NULL, intent text NOT NULL, payload jsonb)`,
  );
  return adapter;
}
