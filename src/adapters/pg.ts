/**
 * node-postgres adapter. `fromPg(pool)` for a pool idem opens transactions on; `fromPgClient(client)`
 * for a client already inside the caller's transaction.
 *
 * @example
 * const idem = createIdem({ sql: fromPg(pool) });
 * // or, inside your own transaction:
 * await client.query('BEGIN');
 * await idem.runIn(fromPgClient(client), spec, async (tx) => { ... });
 * await client.query('COMMIT');
 */
import type { PoolClient } from 'pg';
import { PreparedStatementsUnsupportedError } from '../core/errors.js';
import { unheardEvents, type IdemEvents } from '../core/event-channel.js';
import { promised } from '../core/promised.js';
import { classifyFailure } from '../core/failures.js';
import { isPreparedStatementMismatch } from '../core/prepared-statements.js';
import {
  transactionOnFirstUse,
  type DeferredTransaction,
  type DeferringSql,
  type QueryResult,
  type Row,
  type Sql,
  type Transaction,
} from '../core/sql.js';
import {
  ConnectionBounds,
  resolveTransactionTimeouts,
  type TransactionTimeouts,
} from '../core/transaction-timeouts.js';
import {
  deferredSession,
  isPipelined,
  pipelinedSession,
  sequentialSession,
  type TransactionSession,
} from './pg-pipeline.js';
import { transactionOf, type RunArguments, type RunStatement } from './wiring.js';

export { pgConnectionDefaults } from '../core/connection-defaults.js';

/** The subset of `pg.Pool` idem uses (types only: the core never loads `pg`). */
export interface PgPoolLike<C extends PgClientLike = PoolClient> extends PgClientLike {
  connect(): Promise<C & { release(error?: Error | boolean): void }>;
}

/** The subset of `pg.Client` / `pg.PoolClient` idem uses. */
export interface PgClientLike {
  query(text: string, params?: unknown[]): Promise<{ rows: unknown[]; rowCount: number | null }>;
  query(config: {
    name: string;
    text: string;
    values?: unknown[];
  }): Promise<{ rows: unknown[]; rowCount: number | null }>;
}

/** What node-postgres answers a query with, as far as idem reads it (`PgClientLike.query`). */
interface PgAnswer {
  rows: unknown[];
  rowCount: number | null;
}

/** Options of the node-postgres adapter. */
export interface PgAdapterOptions {
  /**
   * Send idem's own statements as named prepared statements, parsed and planned once per
   * connection. Default true: on a direct connection it measured 1.20–1.49× the throughput of
   * first executions and 1.30–1.60× of replays (`idem.run`, 32 workers, side by side in
   * bench/pooler.bench.ts, three runs), because the claim and the replay read are planned anew on
   * every unnamed call.
   *
   * Set it to false behind a pooler that does not keep prepared statements across transactions:
   * PgBouncer in transaction mode before 1.21, or 1.21+ with `max_prepared_statements = 0`, and
   * any pooler that says it does not support protocol-level prepared statements. They are safe on
   * a direct connection, behind a session-mode pooler, and behind a transaction-mode pooler that
   * keeps them (PgBouncer 1.21+ with `max_prepared_statements` > 0). See docs/operations/deployment.md.
   *
   * Left on behind a pooler that cannot keep them, the first statement that fails for it throws
   * `PreparedStatementsUnsupportedError` (retryable: nothing was committed) and `fromPg` sends
   * every later statement unnamed, after one warning (an `error` event, see `events`). `fromPgClient`
   * keeps no such memory between transactions: pass `prepare: false` there.
   * User statements are never prepared by idem, whatever this says.
   */
  prepare?: boolean;
  /**
   * Where the adapter reports what it survived (`createEvents()`): once, when it turns named
   * statements off after a pooler refused one, an `error` event (source `pg`, where `prepare`)
   * with the refusal, whose message names the setting. Default: none, and that line goes to stderr.
   */
  events?: IdemEvents;
  /**
   * Bounds on every transaction `fromPg` opens for idem (keyed operations, steps, the outbox,
   * claims, webhooks, sagas): a transaction-local `statement_timeout` and
   * `idle_in_transaction_session_timeout`, sent in the same message as BEGIN (no round trip of
   * their own). Default `{ statementMs: 10000, idleMs: 15000 }`; `false` sends none and leaves
   * the pool's session settings in force. See `TransactionTimeouts` and docs/operations/timeouts.md.
   */
  timeouts?: TransactionTimeouts | false;
}

/** Whether to name statements; `fromPg` turns it off for good after a pooler refusal. */
interface PrepareState {
  enabled: boolean;
  /** Called by the first refusal; set only where the state outlives one transaction. */
  turnOff?(error: PreparedStatementsUnsupportedError): void;
}

/**
 * Runs statements on node-postgres, as named prepared statements while `prepare` is enabled.
 * Promise callbacks rather than an async function: one promise fewer on every statement (see
 * observability/events.ts, `observe`); a driver that throws instead of rejecting still rejects.
 */
const runner =
  (prepare: PrepareState): RunStatement<PgClientLike> =>
  <R extends Row>(...[db, text, params, options]: RunArguments<PgClientLike>): Promise<QueryResult<R>> => {
    const values = params as unknown[] | undefined;
    const name = prepare.enabled ? options?.name : undefined;
    if (name === undefined) return promised(() => db.query(text, values)).then(toResult<R>);
    return promised(() => db.query({ name, text, values })).then(toResult<R>, (error: unknown) => {
      if (!isPreparedStatementMismatch(error)) throw error;
      const refused = new PreparedStatementsUnsupportedError(name, error);
      prepare.turnOff?.(refused);
      throw refused;
    });
  };

/**
 * node-postgres's answer as idem's. Several statements without parameters (a migration file) come
 * back as an array of results: the last one is the answer.
 */
function toResult<R extends Row>(raw: PgAnswer | PgAnswer[]): QueryResult<R> {
  const result = Array.isArray(raw) ? raw.at(-1)! : raw;
  return { rows: result.rows as R[], rowCount: result.rowCount ?? result.rows.length };
}

/**
 * A transaction on a client the caller already began. idem will not BEGIN or COMMIT it.
 *
 * Listen for `error` on the checked-out client while you hold it: node-postgres emits it when the
 * connection is lost (a failover, a restart: `57P01`), and with no listener that event ends the
 * process. Release a client whose connection failed with the error, so the pool destroys it.
 *
 * @example
 * const client = await pool.connect();
 * let lost: Error | undefined;
 * const onError = (error: Error) => (lost = error);
 * client.on('error', onError);
 * try {
 *   await client.query('BEGIN');
 *   await idem.runIn(fromPgClient(client), spec, async (tx) => createOrder(tx));
 *   await client.query('COMMIT');
 * } catch (error) {
 *   await client.query('ROLLBACK').catch((rollbackError: Error) => (lost ??= rollbackError));
 *   throw error;
 * } finally {
 *   client.off('error', onError);
 *   client.release(lost);
 * }
 */
export function fromPgClient<C extends PgClientLike>(
  client: C,
  options: PgAdapterOptions = {},
): Transaction<C> {
  return transactionOf(client, runner({ enabled: options.prepare ?? true }));
}

/**
 * A pool: statements run on any connection; `transaction` checks one out for BEGIN … COMMIT.
 * Behind a transaction-mode pooler, pass `{ prepare: false }`.
 *
 * @example
 * import pg from 'pg';
 * import { fromPg } from 'idem/pg';
 * const sql = fromPg(new pg.Pool({ connectionString: process.env.DATABASE_URL }));
 * const idem = createIdem({ sql });
 */
export function fromPg<Client extends PgClientLike = PoolClient>(
  pool: PgPoolLike<Client>,
  options: PgAdapterOptions = {},
): Sql<Client> {
  const events = options.events ?? unheardEvents;
  const warn = (error: PreparedStatementsUnsupportedError) =>
    events.emit('error', { source: 'pg', where: 'prepare', error });
  const prepare: PrepareState = {
    enabled: options.prepare ?? true,
    turnOff(error) {
      if (!this.enabled) return;
      this.enabled = false;
      warn(error);
    },
  };
  const run = runner(prepare);
  const timeouts = resolveTransactionTimeouts(options.timeouts);
  const bounds = timeouts ? new ConnectionBounds(timeouts) : undefined;
  const sql: DeferringSql<Client> = {
    // A pool hands out any connection; prepared statements are per connection, so pg prepares on
    // first use on each one.
    query: (text, params, queryOptions) => run(pool, text, params, queryOptions),
    transaction: (fn) =>
      inSession(pool, (client) => {
        const session = isPipelined(client) ? pipelinedSession(client, run) : sequentialSession(client, run);
        return { session, run: () => begin(session, client).then(() => fn(session.tx)) };
      }),
    // Only where BEGIN can go out without a round trip of its own (pipeline mode). A sequential
    // connection begins at once, as `transaction` does: `begun` is true when `fn` starts, `onBegin`
    // is not called, and no statement goes out with COMMIT (`canCommitWith` is false).
    [transactionOnFirstUse]: (fn, onBegin) =>
      inSession(pool, (client) => {
        if (!isPipelined(client)) {
          const session = sequentialSession(client, run);
          const tx: DeferredTransaction<Client> = { ...session.tx, begun: true, begin: () => undefined };
          return { session, run: () => begin(session, client).then(() => fn(tx)) };
        }
        const session = deferredSession(client, run, (inner) => {
          void begin(inner, client);
          onBegin(inner.tx);
        });
        return { session, run: () => fn(session.tx) };
      }),
  };
  return sql;

  /** BEGIN on `session`, with the transaction bounds the connection does not have yet. */
  function begin(session: TransactionSession<Client>, client: Client): Promise<void> {
    return session.begin(bounds?.textFor(client), bounds && ((answer) => bounds.learn(client, answer)));
  }
}

/**
 * One of `fromPg`'s transactions on a client checked out of `pool`: `start` builds its session
 * and what runs in it (BEGIN, the caller's function); then COMMIT, or ROLLBACK on failure, and
 * the client goes back to the pool (destroyed when its connection failed).
 */
async function inSession<Client extends PgClientLike, T>(
  pool: PgPoolLike<Client>,
  start: (client: Client) => { session: TransactionSession<Client>; run: () => Promise<T> },
): Promise<T> {
  let broken: Error | undefined;
  // node-postgres emits 'error' on a checked-out client whose connection is lost (a server
  // restart, a cut connection). With no listener that is an uncaught exception that ends the
  // process; the pending query rejects with the same error anyway, so only remember it.
  const onError = (error: Error) => {
    broken = error;
  };
  const client = await checkOut(pool, onError);
  const events = client as ClientEvents;
  const { session, run } = start(client);
  try {
    const value = await run();
    await session.commit();
    return value;
  } catch (error) {
    if (broken === undefined && classifyFailure(error).discardConnection) {
      // Lost, timed out mid-statement (pg's query_timeout leaves the statement running on the
      // connection), or on a read-only node after a failover: a ROLLBACK would wait behind the
      // stuck statement or land on the same standby. Destroy the connection; the server rolls
      // back when it sees it go (or when idle_in_transaction_session_timeout ends it).
      broken = error instanceof Error ? error : new Error(String(error));
    }
    try {
      if (broken === undefined && !session.ended) await client.query('ROLLBACK');
      else broken ??= session.lost;
    } catch (rollbackError) {
      // The connection is unusable; destroy it rather than return it to the pool.
      broken = rollbackError as Error;
    }
    throw error;
  } finally {
    events.off?.('error', onError);
    client.release(broken ?? false);
  }
}

/** The part of a node-postgres client's events idem uses. */
interface ClientEvents {
  on?(event: 'error', listener: (error: Error) => void): void;
  off?(event: 'error', listener: (error: Error) => void): void;
}

type ConnectCallback<C> = (error: Error | undefined, client: C) => void;

/**
 * Checks a client out of `pool` with `onError` listening from the moment the pool hands it over.
 * pg-pool calls a `connect(callback)` synchronously, inside the socket event that finished the
 * connection; a promise resumes only after that event, and a server shutting down can send its
 * FATAL 57P01 in the same packet as the connection's readiness: with the pool's own listener
 * already removed, that 'error' had no listener and ended the process (seen in the cells test,
 * which restarts a PostgreSQL under load). Pools whose `connect` takes no callback are awaited.
 */
function checkOut<C extends PgClientLike>(
  pool: PgPoolLike<C>,
  onError: (error: Error) => void,
): Promise<C & { release(error?: Error | boolean): void }> {
  type Checked = C & { release(error?: Error | boolean): void };
  const listen = (client: Checked): Checked => {
    (client as ClientEvents).on?.('error', onError);
    return client;
  };
  if (pool.connect.length === 0) return pool.connect().then(listen);
  return new Promise((resolve, reject) => {
    (pool.connect as unknown as (callback: ConnectCallback<Checked>) => void)((error, client) => {
      if (error) reject(error);
      else resolve(listen(client));
    });
  });
}

export * from './pg-primary.js';
