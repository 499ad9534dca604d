/**
 * How every adapter turns a driver into idem's `Sql` and `Transaction`, written once: an adapter
 * supplies how one statement runs on the driver's client (`RunStatement`) and how the driver opens
 * a transaction; the wiring is the same for all of them.
 */
import type { QueryOptions, QueryResult, Row, Sql, Transaction } from '../core/sql.js';

/** Runs one statement on a driver's client: its pool or connection, or one of its transactions. */
export type RunStatement<Client> = <R extends Row>(
  client: Client,
  text: string,
  params?: readonly unknown[],
  options?: QueryOptions,
) => Promise<QueryResult<R>>;

/** idem's `Transaction` over the driver's transaction object `tx` (idem never commits it). */
export function transactionOf<Tx>(tx: Tx, run: RunStatement<Tx>): Transaction<Tx> {
  return { client: tx, query: (text, params, options) => run(tx, text, params, options) };
}

/**
 * idem's `Sql` over a driver: statements run on `db`, and `begin(fn)` runs `fn` in one of the
 * driver's own transactions (committed when `fn` resolves, rolled back when it throws).
 */
export function sqlOf<Db, Tx>(
  db: Db,
  run: RunStatement<NoInfer<Db | Tx>>,
  begin: <T>(fn: (tx: Tx) => Promise<T>) => Promise<T>,
): Sql<Tx> {
  return {
    query: (text, params, options) => run(db, text, params, options),
    transaction: (fn) => begin((tx) => fn(transactionOf(tx, run))),
  };
}
