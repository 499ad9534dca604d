/**
 * Drizzle adapter (node-postgres, postgres.js or PGlite drivers). `fromDrizzle(db)` for the
 * database; inside your own `db.transaction(tx => …)`, pass `fromDrizzleTransaction(tx)` to
 * `idem.runIn`. The handler's `tx.client` is the Drizzle transaction.
 *
 * @example
 * const idem = createIdem({ sql: fromDrizzle(db) });
 * await idem.run(spec, async (tx) => tx.client.insert(orders).values(row));
 */
import { sql, type SQL, type SQLWrapper } from 'drizzle-orm';
import type { QueryResult, Row, Sql, Transaction } from '../core/sql.js';
import { sqlOf, transactionOf, type OrmAdapterOptions } from './wiring.js';

export type { OrmAdapterOptions } from './wiring.js';

/** The subset of a Drizzle database or transaction idem uses. */
export interface DrizzleQueryableLike {
  execute(query: SQLWrapper): PromiseLike<unknown>;
}

export interface DrizzleLike<Tx extends DrizzleQueryableLike> extends DrizzleQueryableLike {
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
}

/** Rewrites `$1`-style text into a Drizzle `SQL` with bound parameters. */
function toDrizzleSql(text: string, params: readonly unknown[] = []): SQL {
  if (params.length === 0) return sql.raw(text);
  const pieces = text.split(/\$(\d+)/);
  const chunks: SQL[] = [];
  pieces.forEach((piece, i) => {
    // sql.param keeps an array one parameter (a `text[]`); interpolating it would expand it into a list.
    chunks.push(i % 2 === 0 ? sql.raw(piece) : sql`${sql.param(params[Number(piece) - 1])}`);
  });
  return sql.join(chunks);
}

function normalize<R extends Row>(result: unknown): QueryResult<R> {
  // node-postgres: { rows, rowCount }; postgres.js: an array with `count`; PGlite: { rows, affectedRows }.
  if (Array.isArray(result)) {
    const count = (result as { count?: number }).count;
    return { rows: [...(result as R[])], rowCount: typeof count === 'number' ? count : result.length };
  }
  const r = result as { rows?: R[]; rowCount?: number | null; affectedRows?: number };
  const rows = r.rows ?? [];
  return { rows, rowCount: r.rowCount ?? (r.affectedRows || rows.length) };
}

async function run<R extends Row>(
  db: DrizzleQueryableLike,
  text: string,
  params?: readonly unknown[],
): Promise<QueryResult<R>> {
  return normalize<R>(await db.execute(toDrizzleSql(text, params)));
}

/**
 * The `tx` of your own `db.transaction(async (tx) => …)` (drizzle-orm's node-postgres, postgres.js
 * or PGlite drivers). idem's statements run in it; idem will not commit or roll it back.
 *
 * @example
 * await db.transaction(async (tx) => {
 *   await tx.insert(orders).values({ id: orderId, amount });
 *   await outbox.add(fromDrizzleTransaction(tx), { topic: 'orders', key: orderId, type: 'order.created', payload: { orderId } });
 * });
 */
export function fromDrizzleTransaction<Tx extends DrizzleQueryableLike>(tx: Tx): Transaction<Tx> {
  return transactionOf(tx, run);
}

/**
 * A Drizzle database: statements run on it; `transaction` uses `db.transaction`.
 *
 * @example
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { fromDrizzle } from 'idem/drizzle';
 * const idem = createIdem({ sql: fromDrizzle(drizzle(pool)) });
 */
export function fromDrizzle<Tx extends DrizzleQueryableLike>(
  db: DrizzleLike<Tx>,
  options: OrmAdapterOptions = {},
): Sql<Tx> {
  return sqlOf(db, run, (fn) => db.transaction(fn), options);
}
