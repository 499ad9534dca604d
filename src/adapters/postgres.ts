/**
 * postgres.js adapter. `fromPostgresJs(sql)` takes the root `sql` (or a reserved connection);
 * `fromPostgresJsTransaction(tx)` takes the `tx` of the caller's own `sql.begin(...)`.
 *
 * @example
 * const idem = createIdem({ sql: fromPostgresJs(sql) });
 * await sql.begin((tx) => idem.runIn(fromPostgresJsTransaction(tx), spec, async () => { ... }));
 */
import type { QueryResult, Row, Sql, Transaction } from '../core/sql.js';

/** The subset of a postgres.js `Sql` / `TransactionSql` idem uses. */
export interface PostgresJsLike {
  unsafe(
    text: string,
    params?: unknown[],
  ): PromiseLike<unknown[] & { count?: number | null }> & {
    simple(): PromiseLike<unknown[] & { count?: number | null }>;
  };
}

export interface PostgresJsRootLike<Tx extends PostgresJsLike = PostgresJsLike> extends PostgresJsLike {
  begin<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
}

async function run<R extends Row>(
  db: PostgresJsLike,
  text: string,
  params?: readonly unknown[],
): Promise<QueryResult<R>> {
  // Without parameters the simple protocol is used, so a migration file can hold several statements.
  const pending =
    params && params.length > 0 ? db.unsafe(text, params as unknown[]) : db.unsafe(text).simple();
  const result = await pending;
  const rows = Array.isArray(result) ? (result as R[]) : [];
  return { rows: [...rows], rowCount: typeof result.count === 'number' ? result.count : rows.length };
}

export function fromPostgresJsTransaction<Tx extends PostgresJsLike>(tx: Tx): Transaction<Tx> {
  return { client: tx, query: (text, params) => run(tx, text, params) };
}

export function fromPostgresJs<Tx extends PostgresJsLike>(sql: PostgresJsRootLike<Tx>): Sql<Tx> {
  return {
    query: (text, params) => run(sql, text, params),
    transaction: (fn) => sql.begin((tx) => fn(fromPostgresJsTransaction(tx))),
  };
}
