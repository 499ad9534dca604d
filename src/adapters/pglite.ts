/**
 * PGlite adapter, for in-process PostgreSQL (tests, local tools, the browser).
 *
 * @example
 * const db = new PGlite();
 * const idem = createIdem({ sql: fromPglite(db) });
 */
import type { QueryResult, Row, Sql, Transaction } from '../core/sql.js';
import { sqlOf, transactionOf } from './wiring.js';

/** The subset of a PGlite instance or transaction idem uses. */
export interface PgliteQueryableLike {
  query(text: string, params?: unknown[]): Promise<{ rows: unknown[]; affectedRows?: number }>;
  exec(text: string): Promise<unknown>;
}

export interface PgliteLike<
  Tx extends PgliteQueryableLike = PgliteQueryableLike,
> extends PgliteQueryableLike {
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
}

async function run<R extends Row>(
  db: PgliteQueryableLike,
  text: string,
  params?: readonly unknown[],
): Promise<QueryResult<R>> {
  if (!params || params.length === 0) {
    // exec runs several statements (migrations); query runs one with parameters.
    const results = (await db.exec(text)) as { rows: unknown[]; affectedRows?: number }[];
    const last = results.at(-1);
    return { rows: (last?.rows ?? []) as R[], rowCount: last?.affectedRows || last?.rows.length || 0 };
  }
  const result = await db.query(text, params as unknown[]);
  return { rows: result.rows as R[], rowCount: result.affectedRows || result.rows.length };
}

/**
 * The `tx` of your own `db.transaction(async (tx) => …)`. idem will not commit or roll it back.
 *
 * @example
 * await db.transaction(async (tx) => {
 *   await idem.runIn(fromPgliteTransaction(tx), spec, async (tx) => createOrder(tx));
 * });
 */
export function fromPgliteTransaction<Tx extends PgliteQueryableLike>(tx: Tx): Transaction<Tx> {
  return transactionOf(tx, run);
}

/**
 * A PGlite database (in-process PostgreSQL, for tests and local tools): statements run on it;
 * `transaction` uses `db.transaction`.
 *
 * @example
 * import { PGlite } from '@electric-sql/pglite';
 * import { fromPglite } from 'idem/pglite';
 * const sql = fromPglite(new PGlite());
 * await migrate(sql);
 */
export function fromPglite<Tx extends PgliteQueryableLike>(db: PgliteLike<Tx>): Sql<Tx> {
  // In-process: no link that can fail, and a single-user backend without timers (no timeouts).
  return sqlOf(db, run, (fn) => db.transaction(fn), { timeouts: false });
}
