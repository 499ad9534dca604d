/**
 * TypeORM adapter (PostgreSQL driver). `fromTypeORM(dataSource)` opens idem's transactions with
 * `dataSource.transaction(async (manager) => …)`; inside your own, pass
 * `fromTypeORMTransaction(manager)` to `idem.runIn`. The handler's `tx.client` is the
 * `EntityManager`, so business writes use your repositories (`tx.client.getRepository(Order)`).
 *
 * @example
 * const idem = createIdem({ sql: fromTypeORM(dataSource) });
 * await idem.run(spec, async (tx) => tx.client.getRepository(Order).save({ amount: 10 }));
 * // or, inside your own transaction:
 * await dataSource.transaction((manager) => idem.runIn(fromTypeORMTransaction(manager), spec, handler));
 *
 * idem's statements run on the manager's own query runner (`manager.queryRunner.query(text,
 * params, true)`, which gives rows and the driver's row count), so on the transaction's connection,
 * never on a second one. Outside a transaction each statement checks out a query runner for the
 * same reason: `dataSource.query` gives no row counts. Errors stay TypeORM's `QueryFailedError`,
 * which carries the SQLSTATE as `code`.
 */
import { InvalidArgumentError } from '../core/errors.js';
import { resolveTransactionTimeouts, setLocalTimeouts } from '../core/transaction-timeouts.js';
import type { OrmAdapterOptions } from './wiring.js';

export type { OrmAdapterOptions } from './wiring.js';
import type { QueryResult, Row, Sql, Transaction } from '../core/sql.js';

/** The subset of a TypeORM `QueryRunner` idem uses. */
export interface TypeORMQueryRunnerLike {
  readonly isTransactionActive: boolean;
  query(
    query: string,
    parameters: unknown[] | undefined,
    useStructuredResult: true,
  ): Promise<{ records: unknown[]; affected?: number | null }>;
  release(): Promise<void>;
}

/** The subset of a TypeORM `EntityManager` idem uses: the query runner of its transaction. */
export interface TypeORMEntityManagerLike {
  readonly queryRunner?: TypeORMQueryRunnerLike;
}

/** The subset of a TypeORM `DataSource` idem uses. */
export interface TypeORMDataSourceLike<Manager extends TypeORMEntityManagerLike> {
  /** Not used; it tells TypeScript the manager type (`transaction` is overloaded). */
  readonly manager: Manager;
  createQueryRunner(): TypeORMQueryRunnerLike;
  transaction<T>(fn: (manager: Manager) => Promise<T>): Promise<T>;
}

async function run<R extends Row>(
  runner: TypeORMQueryRunnerLike,
  text: string,
  params: readonly unknown[] | undefined,
): Promise<QueryResult<R>> {
  const result = await runner.query(text, params ? [...params] : undefined, true);
  const rows = (result.records ?? []) as R[];
  return { rows, rowCount: result.affected ?? rows.length };
}

/**
 * The `EntityManager` of your own `dataSource.transaction(async (manager) => …)`. idem will not
 * commit or roll it back. Throws `InvalidArgumentError` for a manager outside a transaction
 * (`dataSource.manager`): idem's writes would commit on their own, apart from yours.
 *
 * @example
 * await dataSource.transaction(async (manager) => {
 *   const order = await manager.save(Order, { amount });
 *   await outbox.add(fromTypeORMTransaction(manager), { topic: 'orders', key: String(order.id), type: 'order.created', payload: order });
 * });
 */
export function fromTypeORMTransaction<Manager extends TypeORMEntityManagerLike>(
  manager: Manager,
): Transaction<Manager> {
  const runner = manager.queryRunner;
  if (!runner?.isTransactionActive) {
    throw new InvalidArgumentError(
      'fromTypeORMTransaction needs the EntityManager of dataSource.transaction(...) (or of a query runner inside startTransaction)',
    );
  }
  return { client: manager, query: (text, params) => run(runner, text, params) };
}

/**
 * A `DataSource`: each statement checks out a query runner; `transaction` uses `dataSource.transaction`.
 *
 * @example
 * import { fromTypeORM } from 'idem/typeorm';
 * const idem = createIdem({ sql: fromTypeORM(dataSource) });
 */
export function fromTypeORM<Manager extends TypeORMEntityManagerLike>(
  dataSource: TypeORMDataSourceLike<Manager>,
  options: OrmAdapterOptions = {},
): Sql<Manager> {
  const timeouts = resolveTransactionTimeouts(options.timeouts);
  const bounds = timeouts ? setLocalTimeouts(timeouts) : undefined;
  return {
    async query<R extends Row>(text: string, params?: readonly unknown[]) {
      const runner = dataSource.createQueryRunner();
      try {
        return await run<R>(runner, text, params);
      } finally {
        await runner.release();
      }
    },
    transaction: (fn) =>
      dataSource.transaction(async (manager) => {
        const tx = fromTypeORMTransaction(manager);
        if (bounds) await tx.query(bounds);
        return fn(tx);
      }),
  };
}
