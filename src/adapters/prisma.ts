/**
 * Prisma adapter (Prisma 7 with `@prisma/adapter-pg`, the driver adapter that needs no query
 * engine binary). `fromPrisma(prisma)` opens idem's transactions with `prisma.$transaction(async (tx) => …)`;
 * inside your own interactive transaction, pass `fromPrismaTransaction(tx)` to `idem.runIn`. The
 * handler's `tx.client` is the Prisma transaction client, so business writes use your models.
 *
 * @example
 * const idem = createIdem({ sql: fromPrisma(prisma) });
 * await idem.run(spec, async (tx) => tx.client.order.create({ data: { amount: 10 } }));
 * // or, inside your own transaction:
 * await prisma.$transaction((tx) => idem.runIn(fromPrismaTransaction(tx), spec, async () => { ... }));
 *
 * What Prisma's raw API imposes, and how this adapter meets it:
 * - `$queryRawUnsafe` returns rows and no count, `$executeRawUnsafe` a count and no rows: a
 *   statement that returns rows (a query, or a write with `RETURNING`) goes to the first and its
 *   row count is its number of rows; every other statement goes to the second.
 * - Prisma cannot read columns of type `void` (`SELECT pg_advisory_xact_lock(…)`) or `interval`:
 *   raw queries fail with P2010 "UnsupportedNativeDataType". idem's own statements never return
 *   them; in your own `tx.query`, cast them (`::text`) or select something else.
 * - Values come back the Prisma way: `int8` as `bigint`, `numeric` as `Decimal`, `bytea` as
 *   `Uint8Array`, `jsonb` parsed.
 * - Errors stay Prisma's (`PrismaClientKnownRequestError` with code `P2010`, or a `DriverAdapterError`
 *   from a failed COMMIT); `sqlStateOf` finds the SQLSTATE inside, so idem still retries `40001`
 *   and `40P01` and answers a lock timeout as in progress.
 */
import type { QueryResult, Row, Sql, Transaction } from '../core/sql.js';
import { returnsRows } from './sql-text.js';
import { sqlOf, transactionOf } from './wiring.js';
import type { TransactionTimeouts } from '../core/transaction-timeouts.js';

/** The subset of a `PrismaClient` or interactive-transaction client idem uses. */
export interface PrismaQueryableLike {
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): PromiseLike<T>;
  $executeRawUnsafe(query: string, ...values: unknown[]): PromiseLike<number>;
}

/** The options of `prisma.$transaction(fn, options)`. */
export interface PrismaTransactionOptions {
  /**
   * Longest an interactive transaction may run, in ms, before Prisma rolls it back. Default here
   * 60 000. Prisma's own default, 5 000, would cut off any handler that runs longer than 5 s, and
   * a duplicate request that waits for the first one (idem's `waitMs`, 5 000 by default) inside
   * its transaction. A long timeout costs nothing while transactions are short.
   */
  timeout?: number;
  /**
   * Longest wait for a connection before the transaction starts, in ms. Default here 5 000, the
   * connect bound idem gives its own pools (`pgConnectionDefaults`). Prisma's own default, 2 000,
   * refused transactions (P2028) when 60 callers shared a pool of 10 on a busy 2-core machine,
   * where each waited its turn for a few seconds; past the bound the failure is transient (HTTP
   * 503 with Retry-After), so a longer wait only spares a retry.
   */
  maxWait?: number;
  /** Default: the database's (READ COMMITTED), which is what idem's statements are written for. */
  isolationLevel?: 'ReadUncommitted' | 'ReadCommitted' | 'RepeatableRead' | 'Serializable';
}

/** A `PrismaClient`: raw queries plus interactive transactions. */
export interface PrismaLike<Tx extends PrismaQueryableLike> extends PrismaQueryableLike {
  $transaction<T>(fn: (tx: Tx) => Promise<T>, options?: PrismaTransactionOptions): Promise<T>;
}

/** Options of the Prisma adapter. */
export interface PrismaAdapterOptions {
  /** Options for the transactions idem opens. Default `{ timeout: 60_000, maxWait: 5_000 }`. */
  transaction?: PrismaTransactionOptions;
  /**
   * Bounds on every transaction the adapter opens for idem: a transaction-local
   * `statement_timeout` and `idle_in_transaction_session_timeout`, sent as one
   * `SELECT set_config(…)` at the start of the transaction (Prisma sends BEGIN itself: one round
   * trip more). Default `{ statementMs: 10000, idleMs: 15000 }`; `false` sends none.
   */
  timeouts?: TransactionTimeouts | false;
}

const defaultTransaction: PrismaTransactionOptions = { timeout: 60_000, maxWait: 5_000 };

async function run<R extends Row>(
  db: PrismaQueryableLike,
  text: string,
  params: readonly unknown[] = [],
): Promise<QueryResult<R>> {
  if (returnsRows(text)) {
    const rows = await db.$queryRawUnsafe<R[]>(text, ...params);
    return { rows, rowCount: rows.length };
  }
  const rowCount = await db.$executeRawUnsafe(text, ...params);
  return { rows: [], rowCount };
}

/**
 * The `tx` of your own `prisma.$transaction(async (tx) => …)`. idem will not commit or roll it back.
 *
 * @example
 * await prisma.$transaction(async (tx) => {
 *   const order = await tx.order.create({ data: { amount } });
 *   await outbox.add(fromPrismaTransaction(tx), { topic: 'orders', key: String(order.id), type: 'order.created', payload: order });
 * });
 */
export function fromPrismaTransaction<Tx extends PrismaQueryableLike>(tx: Tx): Transaction<Tx> {
  return transactionOf(tx, run);
}

/**
 * A `PrismaClient`: statements run on it directly; `transaction` opens an interactive transaction.
 *
 * @example
 * import { fromPrisma } from 'idem/prisma';
 * const idem = createIdem({ sql: fromPrisma(prisma) });
 */
export function fromPrisma<Tx extends PrismaQueryableLike>(
  prisma: PrismaLike<Tx>,
  options: PrismaAdapterOptions = {},
): Sql<Tx> {
  const transactionOptions = { ...defaultTransaction, ...options.transaction };
  return sqlOf(prisma, run, (fn) => prisma.$transaction(fn, transactionOptions), {
    ...(options.timeouts !== undefined ? { timeouts: options.timeouts } : {}),
  });
}
