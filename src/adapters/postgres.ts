/**
 * postgres.js adapter. `fromPostgresJs(sql)` takes the root `sql` (or a reserved connection);
 * `fromPostgresJsTransaction(tx)` takes the `tx` of the caller's own `sql.begin(...)`.
 *
 * @example
 * const idem = createIdem({ sql: fromPostgresJs(sql) });
 * await sql.begin((tx) => idem.runIn(fromPostgresJsTransaction(tx), spec, async () => { ... }));
 */
import { PreparedStatementsUnsupportedError } from '../core/errors.js';
import { isPreparedStatementMismatch } from '../core/prepared-statements.js';
import type { QueryOptions, QueryResult, Row, Sql, Transaction } from '../core/sql.js';
import { sqlOf, transactionOf, type RunStatement } from './wiring.js';

/** The subset of a postgres.js `Sql` / `TransactionSql` idem uses. */
export interface PostgresJsLike {
  unsafe(
    text: string,
    params?: unknown[],
    options?: { prepare?: boolean },
  ): PromiseLike<unknown[] & { count?: number | null }> & {
    simple(): PromiseLike<unknown[] & { count?: number | null }>;
  };
}

/** Options of the postgres.js adapter. */
export interface PostgresJsAdapterOptions {
  /**
   * Ask postgres.js to prepare idem's own named statements (postgres.js names and caches them per
   * connection). Default true: measured 1.39–1.62× first executions and 1.97–2.32× replays of
   * `idem.run` (bench/pooler.bench.ts), since postgres.js describes every unprepared statement
   * with parameters in a round trip of its own. The connection's own `prepare` option still
   * governs: a `sql` created with `postgres(url, { prepare: false })`, as postgres.js requires
   * behind a transaction-mode pooler, prepares nothing, whatever this says. Set this to false to
   * keep idem's statements unprepared on a connection that prepares the application's own.
   * A pooler refusal of one of them throws `PreparedStatementsUnsupportedError` (retryable).
   */
  prepare?: boolean;
}

export interface PostgresJsRootLike<Tx extends PostgresJsLike = PostgresJsLike> extends PostgresJsLike {
  begin<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
}

/** Runs statements on postgres.js, as named prepared statements only when `prepare`. */
const runner =
  (prepare: boolean): RunStatement<PostgresJsLike> =>
  async <R extends Row>(
    db: PostgresJsLike,
    text: string,
    params?: readonly unknown[],
    options?: QueryOptions,
  ): Promise<QueryResult<R>> => {
    const name = prepare ? options?.name : undefined;
    // Without parameters the simple protocol is used, so a migration file can hold several statements.
    const pending =
      params && params.length > 0
        ? db.unsafe(text, params as unknown[], { prepare: name !== undefined })
        : db.unsafe(text).simple();
    let result;
    try {
      result = await pending;
    } catch (error) {
      if (name !== undefined && isPreparedStatementMismatch(error)) {
        throw new PreparedStatementsUnsupportedError(name, error);
      }
      throw error;
    }
    const rows = Array.isArray(result) ? (result as R[]) : [];
    return { rows: [...rows], rowCount: typeof result.count === 'number' ? result.count : rows.length };
  };

/**
 * The `tx` of your own `sql.begin(async (tx) => …)`. idem will not commit or roll it back.
 *
 * @example
 * await sql.begin(async (tx) => {
 *   await tx`INSERT INTO orders (id, amount) VALUES (${orderId}, ${amount})`;
 *   await outbox.add(fromPostgresJsTransaction(tx), { topic: 'orders', key: orderId, type: 'order.created', payload: { orderId } });
 * });
 */
export function fromPostgresJsTransaction<Tx extends PostgresJsLike>(
  tx: Tx,
  options: PostgresJsAdapterOptions = {},
): Transaction<Tx> {
  return transactionOf(tx, runner(options.prepare ?? true));
}

/**
 * A postgres.js `sql`: statements run on its pool; `transaction` uses `sql.begin`. Behind a
 * transaction-mode pooler, pass `{ prepare: false }`.
 *
 * @example
 * import postgres from 'postgres';
 * import { fromPostgresJs } from 'idem/postgres';
 * const idem = createIdem({ sql: fromPostgresJs(postgres(process.env.DATABASE_URL!)) });
 */
export function fromPostgresJs<Tx extends PostgresJsLike>(
  sql: PostgresJsRootLike<Tx>,
  options: PostgresJsAdapterOptions = {},
): Sql<Tx> {
  return sqlOf(sql, runner(options.prepare ?? true), (fn) => sql.begin(fn));
}
