/**
 * The ORM adapters under test (Prisma, TypeORM, Knex, MikroORM through Knex), in the shape of
 * adapters.ts, plus the ORM's own root object (`root`) for tests that need its API.
 */
import { MikroORM } from '@mikro-orm/postgresql';
import { PrismaPg } from '@prisma/adapter-pg';
import knex, { type Knex } from 'knex';
import { DataSource, type EntityManager } from 'typeorm';
import { fromKnex, fromKnexTransaction } from 'idem/knex';
import { fromPrisma, fromPrismaTransaction } from 'idem/prisma';
import { fromTypeORM, fromTypeORMTransaction } from 'idem/typeorm';
import type { AdapterFactory, AdapterUnderTest } from './adapters.js';
import { databaseUrl, dropAndEnd } from './database.js';
import { ormEntities } from './orm-entities.js';
import { PrismaClient, type Prisma } from './prisma/generated/index.js';

/** An adapter under test with the ORM's root object. */
export interface OrmAdapterUnderTest<Client, Root> extends AdapterUnderTest<Client> {
  root: Root;
}

export interface OrmAdapterFactory<Client, Root> extends AdapterFactory<Client> {
  create(schema: string, url?: string): Promise<OrmAdapterUnderTest<Client, Root>>;
}

/** Prisma 7 on @prisma/adapter-pg; model queries go to `schema` through PrismaPg's `schema` option. */
export const prismaFactory: OrmAdapterFactory<Prisma.TransactionClient, PrismaClient> = {
  name: 'prisma',
  async create(schema, url = databaseUrl()) {
    const prisma = new PrismaClient({
      adapter: new PrismaPg({ connectionString: url, max: 10 }, { schema }),
    });
    return {
      name: 'prisma',
      root: prisma,
      sql: fromPrisma(prisma),
      concurrent: true,
      userTransaction: (fn) => prisma.$transaction((tx) => fn(fromPrismaTransaction(tx))),
      close: dropAndEnd(schema, {
        query: (q) => prisma.$executeRawUnsafe(q),
        end: () => prisma.$disconnect(),
      }),
    };
  },
};

/** TypeORM 1 with the entities of the ORM tests, in `schema`. */
export const typeormFactory: OrmAdapterFactory<EntityManager, DataSource> = {
  name: 'typeorm',
  async create(schema, url = databaseUrl()) {
    const dataSource = new DataSource({
      type: 'postgres',
      url,
      schema,
      poolSize: 10,
      entities: ormEntities.typeorm.all,
    });
    await dataSource.initialize();
    return {
      name: 'typeorm',
      root: dataSource,
      sql: fromTypeORM(dataSource),
      concurrent: true,
      userTransaction: (fn) => dataSource.transaction((manager) => fn(fromTypeORMTransaction(manager))),
      close: dropAndEnd(schema, { query: (q) => dataSource.query(q), end: () => dataSource.destroy() }),
    };
  },
};

/** Knex 3 on pg, with `schema` first on the search path for the query builder. */
export const knexFactory: OrmAdapterFactory<Knex.Transaction, Knex> = {
  name: 'knex',
  async create(schema, url = databaseUrl()) {
    const db = knex({ client: 'pg', connection: url, searchPath: [schema], pool: { min: 0, max: 10 } });
    return {
      name: 'knex',
      root: db,
      sql: fromKnex(db),
      concurrent: true,
      userTransaction: (fn) => db.transaction((trx) => fn(fromKnexTransaction(trx))),
      close: dropAndEnd(schema, { query: (q) => db.raw(q), end: () => db.destroy() }),
    };
  },
};

type MikroKnex = ReturnType<MikroORM['em']['getKnex']>;

/**
 * MikroORM 6 through the Knex adapter: its SQL transactions are Knex transactions (of the Knex
 * copy MikroORM depends on). The caller's transaction is `em.transactional`, joined with
 * `em.getTransactionContext()`.
 */
export const mikroOrmFactory: OrmAdapterFactory<MikroKnex, MikroORM> = {
  name: 'mikro-orm',
  async create(schema, url = databaseUrl()) {
    const orm = await MikroORM.init({
      clientUrl: url,
      schema,
      entities: ormEntities.mikroOrm.all,
      pool: { min: 0, max: 10 },
      allowGlobalContext: true,
    });
    const db = orm.em.getKnex();
    return {
      name: 'mikro-orm',
      root: orm,
      sql: fromKnex(db),
      concurrent: true,
      userTransaction: (fn) =>
        orm.em.fork().transactional((em) => fn(fromKnexTransaction(em.getTransactionContext<MikroKnex>()!))),
      close: dropAndEnd(schema, { query: (q) => db.raw(q), end: () => orm.close() }),
    };
  },
};
