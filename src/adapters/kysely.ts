/**
 * Kysely adapter. `fromKysely(db)` for a `Kysely` instance; inside your own
 * `db.transaction().execute(trx => …)`, pass `fromKyselyTransaction(trx)` to `idem.runIn`.
 * The handler's `tx.client` is the Kysely `Transaction`, so business writes stay type-safe.
 *
 * @example
 * const idem = createIdem({ sql: fromKysely(db) });
 * await idem.run(spec, async (tx) => tx.client.insertInto('orders').values(row).execute());
 */
import { CompiledQuery } from 'kysely';
import type { QueryResult, Row, Sql, Transaction } from '../core/sql.js';
import { sqlOf, transactionOf, type OrmAdapterOptions } from './wiring.js';

export type { OrmAdapterOptions } from './wiring.js';

/** The subset of a Kysely instance or transaction idem uses. */
export interface KyselyQueryableLike {
  executeQuery<R>(query: CompiledQuery<R>): Promise<{ rows: R[]; numAffectedRows?: bigint }>;
}

export interface KyselyLike<Tx extends KyselyQueryableLike> extends KyselyQueryableLike {
  transaction(): { execute<T>(fn: (trx: Tx) => Promise<T>): Promise<T> };
}

async function run<R extends Row>(
  db: KyselyQueryableLike,
  text: string,
  params?: readonly unknown[],
): Promise<QueryResult<R>> {
  const result = await db.executeQuery(CompiledQuery.raw(text, params ? [...params] : []));
  const rows = result.rows as R[];
  return {
    rows,
    rowCount: result.numAffectedRows !== undefined ? Number(result.numAffectedRows) : rows.length,
  };
}

/**
 * The `trx` of your own `db.transaction().execute(async (trx) => …)`. idem's statements run in
 * it; idem will not commit or roll it back.
 *
 * @example
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('orders').values({ id: orderId, amount }).execute();
 *   await outbox.add(fromKyselyTransaction(trx), { topic: 'orders', key: orderId, type: 'order.created', payload: { orderId } });
 * });
 */
export function fromKyselyTransaction<Tx extends KyselyQueryableLike>(trx: Tx): Transaction<Tx> {
  return transactionOf(trx, run);
}

/**
 * A `Kysely` instance: statements run on its pool; `transaction` uses `db.transaction()`.
 *
 * @example
 * import { fromKysely } from 'idem/kysely';
 * const idem = createIdem({ sql: fromKysely(db) });
 */
export function fromKysely<Tx extends KyselyQueryableLike>(
  db: KyselyLike<Tx>,
  options: OrmAdapterOptions = {},
): Sql<Tx> {
  return sqlOf(db, run, (fn) => db.transaction().execute(fn), options);
}
