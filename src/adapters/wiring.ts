/**
 * How every adapter turns a driver into idem's `Sql` and `Transaction`, written once: an adapter
 * supplies how one statement runs on the driver's client (`RunStatement`) and how the driver opens
 * a transaction; the wiring is the same for all of them.
 */
import type { QueryOptions, QueryResult, Row, Sql, Transaction } from '../core/sql.js';
import {
  resolveTransactionTimeouts,
  setLocalTimeouts,
  type TransactionTimeouts,
} from '../core/transaction-timeouts.js';

/** Options of the ORM adapters (`fromKysely`, `fromDrizzle`, `fromKnex`, `fromTypeORM`, `fromPrisma`). */
export interface OrmAdapterOptions {
  /**
   * Bounds on every transaction the adapter opens for idem: a transaction-local
   * `statement_timeout` and `idle_in_transaction_session_timeout`. The ORM sends BEGIN itself,
   * so they go out as one `SELECT set_config(…)` at the start of the transaction: one round trip
   * more per transaction. Default `{ statementMs: 10000, idleMs: 15000 }`; `false` sends none
   * (set them on the database role or the pool's connections instead, see docs/operations/timeouts.md).
   */
  timeouts?: TransactionTimeouts | false;
}

/** What one statement is run with; a runner that needs a name for its row type R takes these as a rest. */
export type RunArguments<Client> = [
  client: Client,
  text: string,
  params?: readonly unknown[],
  options?: QueryOptions,
];

/** Runs one statement on a driver's client: its pool or connection, or one of its transactions. */
export type RunStatement<Client> = <R extends Row>(...args: RunArguments<Client>) => Promise<QueryResult<R>>;

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
  options: OrmAdapterOptions = {},
): Sql<Tx> {
  const timeouts = resolveTransactionTimeouts(options.timeouts);
  const bounds = timeouts ? setLocalTimeouts(timeouts) : undefined;
  return {
    query: (text, params, queryOptions) => run(db, text, params, queryOptions),
    transaction: (fn) =>
      begin(async (tx) => {
        if (bounds) await run(tx, bounds);
        return fn(transactionOf(tx, run));
      }),
  };
}
