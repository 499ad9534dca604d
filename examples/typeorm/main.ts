// idem with TypeORM on PostgreSQL: idem's statements run on the transaction's own query runner,
// so its record commits with the entities the EntityManager saves. `npm run typecheck` compiles
// it; test/adapters/examples.test.ts runs it against PostgreSQL.
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { createIdem, migrate } from 'idem';
import { fromTypeORM, fromTypeORMTransaction } from 'idem/typeorm';

// Column types are explicit, so no decorator metadata is needed (tsx and vitest emit none).
@Entity({ name: 'orders' })
export class Order {
  @PrimaryGeneratedColumn({ type: 'int' })
  id!: number;
  @Column({ type: 'text' })
  tenant!: string;
  @Column({ type: 'int' })
  amount!: number;
  @Column({ type: 'text', nullable: true })
  note!: string | null;
}

export async function main(databaseUrl: string, schema = 'public') {
  const dataSource = await new DataSource({
    type: 'postgres',
    url: databaseUrl,
    schema,
    entities: [Order],
  }).initialize();
  const sql = fromTypeORM(dataSource);
  await migrate(sql, { schema }); // idem's tables; TypeORM migrations own yours
  await dataSource.query(
    `CREATE TABLE IF NOT EXISTS "${schema}".orders (id serial PRIMARY KEY, tenant text NOT NULL, amount int NOT NULL, note text)`,
  );
  const idem = createIdem({ sql, schema });

  // idem opens the transaction (dataSource.transaction); the handler gets its EntityManager.
  const spec = { tenant: 'acme', operation: 'create-order', key: 'order-7f3a', request: { amount: 40 } };
  const create = () =>
    idem.run(spec, async (tx) =>
      tx.client.getRepository(Order).save({ tenant: 'acme', amount: 40, note: null }),
    );
  const first = await create();
  const retry = await create(); // replayed

  // Inside your own transaction.
  const own = { tenant: 'acme', operation: 'create-order', key: 'order-9c1d', request: { amount: 12 } };
  const inOwn = await dataSource.transaction((manager) =>
    idem.runIn(fromTypeORMTransaction(manager), own, async () =>
      manager.getRepository(Order).save({ tenant: 'acme', amount: 12, note: 'own transaction' }),
    ),
  );

  const orders = await dataSource.getRepository(Order).count();
  await dataSource.destroy();
  return { first, retry, inOwn, orders };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(await main(process.env.DATABASE_URL!));
}
