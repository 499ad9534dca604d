/**
 * Knex adapter (the `pg` client), which also serves MikroORM 6 (its SQL drivers run on Knex).
 * `fromKnex(knex)` opens idem's transactions with `knex.transaction(async (trx) => …)`; inside your
 * own, pass `fromKnexTransaction(trx)` to `idem.runIn`. The handler's `tx.client` is the Knex
 * transaction, so business writes use the query builder (`tx.client('orders').insert(row)`).
 *
 * @example
 * const idem = createIdem({ sql: fromKnex(knex) });
 * await idem.run(spec, async (tx) => tx.client('orders').insert({ amount: 10 }).returning('id'));
 * // or, inside your own transaction:
 * await knex.transaction((trx) => idem.runIn(fromKnexTransaction(trx), spec, handler));
 * // MikroORM 6: the Knex transaction of `em.transactional` is `em.getTransactionContext()`.
 * await orm.em.transactional((em) =>
 *   idem.runIn(fromKnexTransaction(em.getTransactionContext()), spec, async () => { em.persist(order); await em.flush(); }));
 *
 * Knex binds `?`, not `$1`: each `$n` becomes a `?` bound to parameter n (a `$1` used twice is
 * bound twice), and each literal `?` (the jsonb operators `?`, `?|`, `?&`) is escaped as `\?`.
 * An array stays one parameter (a PostgreSQL array), as `knex.raw` passes it to `pg` unchanged.
 */
import type { QueryResult, Row, Sql, Transaction } from '../core/sql.js';
import { toQuestionMarks } from './sql-text.js';
import { sqlOf, transactionOf, type OrmAdapterOptions } from './wiring.js';

export type { OrmAdapterOptions } from './wiring.js';

/** The subset of a Knex instance or transaction idem uses. */
export interface KnexQueryableLike {
  raw(sql: string, bindings: readonly unknown[]): PromiseLike<unknown>;
}

/** A Knex instance: raw statements plus transactions. */
export interface KnexLike<Trx extends KnexQueryableLike> extends KnexQueryableLike {
  transaction<T>(fn: (trx: Trx) => Promise<T>): Promise<T>;
}

interface PgResult {
  rows?: unknown[];
  rowCount?: number | null;
}

async function run<R extends Row>(
  db: KnexQueryableLike,
  text: string,
  params?: readonly unknown[],
): Promise<QueryResult<R>> {
  const { text: knexText, bindings } = toQuestionMarks(text, params);
  const raw = (await db.raw(knexText, bindings)) as PgResult | PgResult[];
  // Several statements without parameters (a migration file) come back as an array of results.
  const result = Array.isArray(raw) ? (raw.at(-1) ?? {}) : raw;
  const rows = (result.rows ?? []) as R[];
  return { rows, rowCount: result.rowCount ?? rows.length };
}

/**
 * The `trx` of your own `knex.transaction(async (trx) => …)`. idem will not commit or roll it back.
 *
 * @example
 * await knex.transaction(async (trx) => {
 *   await trx('orders').insert({ id: orderId, amount });
 *   await outbox.add(fromKnexTransaction(trx), { topic: 'orders', key: orderId, type: 'order.created', payload: { orderId } });
 * });
 */
export function fromKnexTransaction<Trx extends KnexQueryableLike>(trx: Trx): Transaction<Trx> {
  return transactionOf(trx, run);
}

/**
 * A Knex instance: statements run on its pool; `transaction` uses `knex.transaction`.
 *
 * @example
 * import { fromKnex } from 'idem/knex';
 * const idem = createIdem({ sql: fromKnex(knex) });
 */
export function fromKnex<Trx extends KnexQueryableLike>(
  knex: KnexLike<Trx>,
  options: OrmAdapterOptions = {},
): Sql<Trx> {
  return sqlOf(knex, run, (fn) => knex.transaction(fn), options);
}
