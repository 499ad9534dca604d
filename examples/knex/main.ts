// idem with Knex on pg: idem's `$1` statements are bound as Knex `?` placeholders, in the same
// transaction as the query builder's writes. `npm run typecheck` compiles it;
// test/adapters/examples.test.ts runs it against PostgreSQL.
import knex from 'knex';
import { createIdem, migrate } from 'idem';
import { fromKnex, fromKnexTransaction } from 'idem/knex';

interface OrderRow {
  id: number;
  tenant: string;
  amount: number;
  note: string | null;
}

export async function main(databaseUrl: string, schema = 'public') {
  const db = knex({ client: 'pg', connection: databaseUrl, searchPath: [schema] });
  const sql = fromKnex(db);
  await migrate(sql, { schema }); // idem's tables; knex migrations own yours
  await db.raw(
    `CREATE TABLE IF NOT EXISTS "${schema}".orders (id serial PRIMARY KEY, tenant text NOT NULL, amount int NOT NULL, note text)`,
  );
  const idem = createIdem({ sql, schema });

  // idem opens the transaction (knex.transaction); the handler gets the Knex transaction.
  const spec = { tenant: 'acme', operation: 'create-order', key: 'order-7f3a', request: { amount: 40 } };
  const create = () =>
    idem.run(spec, async (tx) => {
      const [order] = await tx
        .client<OrderRow>('orders')
        .insert({ tenant: 'acme', amount: 40 })
        .returning('*');
      return order!;
    });
  const first = await create();
  const retry = await create(); // replayed

  // Inside your own transaction.
  const own = { tenant: 'acme', operation: 'create-order', key: 'order-9c1d', request: { amount: 12 } };
  const inOwn = await db.transaction((trx) =>
    idem.runIn(fromKnexTransaction(trx), own, async () => {
      const [order] = await trx<OrderRow>('orders')
        .insert({ tenant: 'acme', amount: 12, note: 'own transaction' })
        .returning('*');
      return order!;
    }),
  );

  const [{ n }] = (await db('orders').count({ n: '*' })) as [{ n: string }];
  await db.destroy();
  return { first, retry, inOwn, orders: Number(n) };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(await main(process.env.DATABASE_URL!));
}
