// idem with MikroORM 6 (PostgreSQL): its transactions are Knex transactions, so idem/knex joins
// `em.transactional` through `em.getTransactionContext()`, and the entities the EntityManager
// flushes commit with idem's record. `npm run typecheck` compiles it;
// test/adapters/examples.test.ts runs it against PostgreSQL.
import { EntitySchema, MikroORM } from '@mikro-orm/postgresql';
import { createIdem, migrate } from 'idem';
import { fromKnex, fromKnexTransaction } from 'idem/knex';

export class Order {
  id!: number;
  tenant!: string;
  amount!: number;
  note?: string;
}

const OrderSchema = new EntitySchema<Order>({
  class: Order,
  tableName: 'orders',
  properties: {
    id: { type: 'number', primary: true, autoincrement: true },
    tenant: { type: 'string' },
    amount: { type: 'number' },
    note: { type: 'string', nullable: true },
  },
});

export async function main(databaseUrl: string, schema = 'public') {
  const orm = await MikroORM.init({ clientUrl: databaseUrl, schema, entities: [OrderSchema] });
  const sql = fromKnex(orm.em.getKnex()); // idem's own transactions: knex.transaction
  await migrate(sql, { schema });
  await orm.em
    .getKnex()
    .raw(
      `CREATE TABLE IF NOT EXISTS "${schema}".orders (id serial PRIMARY KEY, tenant text NOT NULL, amount int NOT NULL, note text)`,
    );
  const idem = createIdem({ sql, schema });

  // Inside MikroORM's transaction: idem joins it, the flush commits with idem's record.
  const spec = { tenant: 'acme', operation: 'create-order', key: 'order-7f3a', request: { amount: 40 } };
  const create = () =>
    orm.em.fork().transactional((em) =>
      idem.runIn(fromKnexTransaction(em.getTransactionContext()), spec, async () => {
        const order = em.create(Order, { tenant: 'acme', amount: 40 });
        await em.flush();
        return { id: order.id };
      }),
    );
  const first = await create();
  const retry = await create(); // replayed: the handler does not run, nothing is flushed

  const orders = await orm.em.fork().count(Order);
  await orm.close();
  return { first, retry, orders };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(await main(process.env.DATABASE_URL!));
}
