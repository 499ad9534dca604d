/**
 * postgres.js adapter. `fromPostgresJs(sql)` takes the root `sql` (or a reserved connection);
 * `fromPostgresJsTransaction(tx)` takes the `tx` of the caller's own `sql.begin(...)`.
 *
 * @example
 * const idem = createIdem({ sql: fromPostgresJs(sql) });
 * await sql.begin((tx) => idem.runIn(fromPostgresJsTransaction(tx), spec, async () => { ... }));
 */
import { CommitOutcomeUnknownError, PreparedStatementsUnsupportedError } from '../core/errors.js';
import { classifyFailure } from '../core/failures.js';
import { sqlStateOf } from '../core/sqlstate.js';
import { isPreparedStatementMismatch } from '../core/prepared-statements.js';
import {
  queryAndCommit,
  type PipelinedTransaction,
  type QueryResult,
  type Row,
  type Sql,
  type Transaction,
} from '../core/sql.js';
import {
  resolveTransactionTimeouts,
  setLocalTimeouts,
  type TransactionTimeouts,
} from '../core/transaction-timeouts.js';
import { transactionOf, type RunArguments, type RunStatement } from './wiring.js';

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
  /**
   * Bounds on every transaction `fromPostgresJs` opens for idem: a transaction-local
   * `statement_timeout` and `idle_in_transaction_session_timeout`, sent right behind BEGIN without
   * waiting (postgres.js pipelines them with the transaction's first statement). Default
   * `{ statementMs: 10000, idleMs: 15000 }`; `false` sends none. Ignored by
   * `fromPostgresJsTransaction` (that transaction is the caller's). See `TransactionTimeouts`.
   */
  timeouts?: TransactionTimeouts | false;
}

export interface PostgresJsRootLike<Tx extends PostgresJsLike = PostgresJsLike> extends PostgresJsLike {
  begin<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
}

/** Runs statements on postgres.js, as named prepared statements only when `prepare`. */
const runner =
  (prepare: boolean): RunStatement<PostgresJsLike> =>
  async <R extends Row>(
    ...[db, text, params, options]: RunArguments<PostgresJsLike>
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
 * A postgres.js `sql`: statements run on its pool; `transaction` uses `sql.begin`, and its
 * transactions send idem's last statement together with COMMIT (`queryAndCommit`): postgres.js
 * pipelines every connection, so the record and COMMIT go out without waiting for each other.
 * Behind a transaction-mode pooler, pass `{ prepare: false }`.
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
  const run = runner(options.prepare ?? true);
  const timeouts = resolveTransactionTimeouts(options.timeouts);
  const setLocal = timeouts ? setLocalTimeouts(timeouts) : undefined;
  return {
    query: (text, params, queryOptions) => run(sql, text, params, queryOptions),
    transaction: (fn) => beginCommittingWith(sql, run, fn, setLocal),
  };
}

/**
 * `sql.begin(fn)`, where `fn` may end the transaction with `queryAndCommit`. postgres.js commits
 * when its callback returns, so the callback returns as soon as `fn` asks for its last statement
 * to go with COMMIT: that statement is already written, and postgres.js writes COMMIT right behind
 * it. `fn` then gets the statement's result once COMMIT is answered; when the statement failed,
 * PostgreSQL answered COMMIT with a rollback and `fn` gets the statement's error; when COMMIT
 * failed, its error. Why: one round trip fewer for every first execution recorded at commit.
 */
async function beginCommittingWith<Tx extends PostgresJsLike, T>(
  sql: PostgresJsRootLike<Tx>,
  run: RunStatement<Tx>,
  fn: (tx: Transaction<Tx>) => Promise<T>,
  setLocal: string | undefined,
): Promise<T> {
  let outcome: Promise<T> | undefined;
  /** Set once `fn` finished and postgres.js sends COMMIT: a lost connection from then on leaves the outcome unknown. */
  let committing = false;
  let last: Promise<QueryResult> | undefined;
  let committed!: { resolve(): void; reject(error: unknown): void };
  const commitAnswered = new Promise<void>((resolve, reject) => (committed = { resolve, reject }));
  commitAnswered.catch(() => undefined); // read only by `fn`, when it asked for it
  try {
    await sql.begin(async (client) => {
      if (setLocal) {
        // Not awaited: postgres.js writes it right behind BEGIN and queues fn's statements behind
        // it on the same connection. It cannot fail on a live connection; on a dead one, so does
        // every statement behind it.
        const bounds = client.unsafe(setLocal).simple();
        void Promise.resolve(bounds).catch(() => undefined);
      }
      let askedToCommit!: () => void;
      const asked = new Promise<void>((resolve) => (askedToCommit = resolve));
      const tx: PipelinedTransaction<Tx> = {
        ...transactionOf(client, run),
        [queryAndCommit]: (text, params, queryOptions) => {
          const statement = run(client, text, params, queryOptions);
          statement.catch(() => undefined); // reported to `fn` below, after COMMIT's answer
          last = statement;
          askedToCommit();
          return commitAnswered.then(() => statement);
        },
      };
      outcome = fn(tx);
      await Promise.race([outcome, asked]);
      committing = true;
    });
  } catch (error) {
    // `fn` failed (postgres.js rolled back), or COMMIT did: `fn` learns the latter from its
    // statement when it sent one with COMMIT.
    const failure = committing ? commitFailure(error) : error;
    if (last === undefined || outcome === undefined) throw failure;
    committed.reject(failure);
    return outcome;
  }
  committed.resolve();
  return outcome!;
}

/**
 * COMMIT's failure as the caller must read it: the server's answer (a SQLSTATE) means it rolled
 * back; a connection lost while COMMIT was in flight leaves the outcome unknown.
 */
function commitFailure(error: unknown): unknown {
  if (sqlStateOf(error) !== undefined) return error;
  return classifyFailure(error).discardConnection ? new CommitOutcomeUnknownError(error) : error;
}
