// idem with Prisma 7 on @prisma/adapter-pg: idem's record commits in the same interactive
// transaction as the order Prisma writes. `npm run typecheck` compiles it; test/adapters/examples.test.ts
// runs it against PostgreSQL.
import { PrismaPg } from '@prisma/adapter-pg';
import { createIdem, migrate } from 'idem';
import { fromPrisma, fromPrismaTransaction } from 'idem/prisma';
import { PrismaClient } from './generated/index.js';

export async function main(databaseUrl: string, schema = 'public') {
  const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: databaseUrl }, { schema }) });
  const sql = fromPrisma(prisma); // idem's transactions: prisma.$transaction(fn, { timeout: 60_000 })
  await migrate(sql, { schema }); // idem's tables; `prisma migrate` owns yours
  await prisma.$executeRawUnsafe(
    `CREATE TABLE IF NOT EXISTS "${schema}".orders (id serial PRIMARY KEY, tenant text NOT NULL, amount int NOT NULL, note text)`,
  );
  const idem = createIdem({ sql, schema });

  // idem opens the transaction; the handler writes with the transaction client, `tx.client`.
  const spec = { tenant: 'acme', operation: 'create-order', key: 'order-7f3a', request: { amount: 40 } };
  const create = () =>
    idem.run(spec, async (tx) => tx.client.order.create({ data: { tenant: 'acme', amount: 40 } }));
  const first = await create();
  const retry = await create(); // replayed: the same order, no second row

  // Inside your own interactive transaction: idem's record commits or rolls back with it.
  const own = { tenant: 'acme', operation: 'create-order', key: 'order-9c1d', request: { amount: 12 } };
  const inOwn = await prisma.$transaction((tx) =>
    idem.runIn(fromPrismaTransaction(tx), own, async () =>
      tx.order.create({ data: { tenant: 'acme', amount: 12, note: 'own transaction' } }),
    ),
  );

  const orders = await prisma.order.count();
  await prisma.$disconnect();
  return { first, retry, inOwn, orders };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(await main(process.env.DATABASE_URL!));
}
