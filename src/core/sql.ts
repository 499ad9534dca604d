/**
 * The only thing idem needs from a database driver. Every adapter (`idem/pg`, `idem/postgres`,
 * `idem/pglite`, `idem/kysely`, `idem/drizzle`, `idem/prisma`, `idem/typeorm`, `idem/knex`) is a
 * few lines that map a driver or ORM onto this shape, so the core never imports one.
 */

/**
 * What a row type may be: any object type, interfaces included (`tx.query<Order>(…)` with
 * `interface Order { id: string; total: number }`), as node-postgres's `QueryResultRow` allows. An
 * interface has no implicit index signature, so a `Record<string, unknown>` constraint would refuse
 * it (TS2344); every object type is assignable to `any` values. Without a type argument a row is
 * `Record<string, unknown>`: columns read unchecked stay `unknown`.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the constraint only; see above
export type Row = Record<string, any>;

/** What a statement returns. */
export interface QueryResult<R extends Row = Record<string, unknown>> {
  rows: R[];
  /** Rows inserted, updated, deleted or returned, as the driver reports it. */
  rowCount: number;
}

/**
 * Something that runs one statement with `$1`-style parameters. A transaction the caller already
 * opened is a `Queryable`: idem's statements then commit or roll back with the caller's own.
 */
export interface Queryable {
  query<R extends Row = Record<string, unknown>>(
    text: string,
    params?: readonly unknown[],
    options?: QueryOptions,
  ): Promise<QueryResult<R>>;
}

/** Hints a driver may use. Adapters that cannot use a hint ignore it. */
export interface QueryOptions {
  /**
   * A stable name for this statement text. Drivers with named prepared statements (node-postgres)
   * parse and plan it once per connection instead of on every call. idem names its own hot
   * statements; user statements are never prepared behind the user's back.
   */
  name?: string;
}

/**
 * A transaction handed to user code. `client` is the driver's own transaction object (a `pg`
 * client, a postgres.js `TransactionSql`, a Kysely `Transaction`, a Drizzle transaction, a PGlite
 * `Transaction`, a Prisma transaction client, a TypeORM `EntityManager`, a Knex `Transaction`), so
 * user code writes through its usual API and still shares idem's transaction.
 */
export interface Transaction<Client = unknown> extends Queryable {
  readonly client: Client;
}

/** A connection source that can also open transactions. */
export interface Sql<Client = unknown> extends Queryable {
  /**
   * Runs `fn` inside `BEGIN … COMMIT`; rolls back and rethrows when `fn` throws.
   * The transaction must use one connection for all its statements.
   */
  transaction<T>(fn: (tx: Transaction<Client>) => Promise<T>): Promise<T>;
}

/**
 * Optional on a `Transaction` that idem's adapter opened itself (`Sql.transaction`): sends `text`
 * as the transaction's last statement together with COMMIT, in one round trip, and answers with
 * the statement's result once both are answered. When the statement fails, PostgreSQL answers the
 * COMMIT with a rollback and this throws the statement's error; when COMMIT fails, its error. The
 * transaction is over either way: `transaction` neither commits nor rolls back after it.
 *
 * A symbol, not a method name, so a handler cannot end idem's transaction by accident. `fromPg`
 * offers it on pools in node-postgres's pipeline mode (`new pg.Pool({ pipeline: true })`).
 */
// Symbol.for: one symbol for every copy of idem loaded in a process (the CommonJS and the ESM
// build, say), so a transaction from one copy's adapter keeps its pipelining in the other's core.
export const queryAndCommit: unique symbol = Symbol.for('idem.queryAndCommit');

/** A transaction whose adapter can send its last statement with COMMIT (see `queryAndCommit`). */
export interface PipelinedTransaction<Client = unknown> extends Transaction<Client> {
  [queryAndCommit](text: string, params?: readonly unknown[], options?: QueryOptions): Promise<QueryResult>;
}

/** Whether `tx` can send its last statement with COMMIT. */
export function canCommitWith<Client>(tx: Transaction<Client>): tx is PipelinedTransaction<Client> {
  return typeof (tx as Partial<PipelinedTransaction<Client>>)[queryAndCommit] === 'function';
}

/**
 * Optional on a `Sql` whose adapter can hold a connection with no transaction open on it (`fromPg`
 * on a pool in pipeline mode), for idem's own transactions whose handler may never touch the
 * database (a claims task that calls a provider and writes nothing): `fn` gets a transaction that
 * sends BEGIN only when it is first used, by a statement, by reading `client`, or by `begin()`.
 * `onBegin` runs at that moment, with BEGIN queued and nothing behind it yet (a claim's row lock
 * goes there). A connection that cannot defer BEGIN begins before `fn` starts (`begun` is then
 * already true) and does not call `onBegin`: `fn` sends what must follow BEGIN itself. A transaction never begun that ends with `queryAndCommit` sends that statement
 * alone: nothing came before it, so it is its own transaction.
 *
 * Why: on the claims worker's path (BEGIN with its bounds, the row lock, the completion, COMMIT)
 * the statements around the completion cost the machine more than the completion itself: raw
 * node-postgres on idem's schema, 8 pipelined connections, one task at a time, drained 2,385
 * tasks/s with the completion alone against 1,672 with the envelope (median of 5 alternating
 * rounds of 6,000 tasks).
 */
// Symbol.for, as `queryAndCommit`: one symbol for every copy of idem in a process.
export const transactionOnFirstUse: unique symbol = Symbol.for('idem.transactionOnFirstUse');

/**
 * The transaction `transactionOnFirstUse` hands to `fn`. Where it can also send its last statement
 * with COMMIT (`canCommitWith`), one never begun sends that statement alone.
 */
export interface DeferredTransaction<Client = unknown> extends Transaction<Client> {
  /** Whether BEGIN went out. */
  readonly begun: boolean;
  /** Sends BEGIN (and calls `onBegin`) now, unless it went out already. */
  begin(): void;
}

/** A `Sql` that can defer BEGIN to a transaction's first use (see `transactionOnFirstUse`). */
export interface DeferringSql<Client = unknown> extends Sql<Client> {
  [transactionOnFirstUse]<T>(
    fn: (tx: DeferredTransaction<Client>) => Promise<T>,
    onBegin: (tx: Transaction<Client>) => void,
  ): Promise<T>;
}

/** Whether `sql` can defer BEGIN to a transaction's first use. */
export function canDeferBegin<Client>(sql: Sql<Client>): sql is DeferringSql<Client> {
  return typeof (sql as Partial<DeferringSql<Client>>)[transactionOnFirstUse] === 'function';
}
