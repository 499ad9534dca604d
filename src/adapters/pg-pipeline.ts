/**
 * How `fromPg` runs BEGIN … COMMIT on a connection: one statement after another, or, on a pool in
 * node-postgres's pipeline mode (`new pg.Pool({ pipeline: true })`), with BEGIN written together
 * with the transaction's first statement and idem's last statement written together with COMMIT.
 *
 * Why: on loopback every round trip costs both processes a wake-up and a system call each way,
 * and on the 2-core bench machine CPU is what bounds throughput. A first execution recorded at
 * commit is BEGIN; the handler's INSERT; the record; COMMIT: four round trips one after another,
 * two when pipelined (measured in bench/operations.bench.ts and bench/http.bench.ts, side by side).
 */
import { CommitOutcomeUnknownError } from '../core/errors.js';
import { classifyFailure } from '../core/failures.js';
import { sqlStateOf } from '../core/sqlstate.js';
import {
  queryAndCommit,
  type DeferredTransaction,
  type PipelinedTransaction,
  type QueryOptions,
  type QueryResult,
  type Transaction,
} from '../core/sql.js';
import { transactionOf, type RunStatement } from './wiring.js';

/** One transaction on a checked-out client. */
export interface TransactionSession<C> {
  readonly tx: Transaction<C>;
  /**
   * Sends BEGIN (pipelined: without waiting for its answer), with `setLocal` (the transaction's
   * `SET LOCAL` bounds, see core/transaction-timeouts.ts) in the same simple-protocol message, so
   * the bounds cost no round trip of their own. `onAnswer` gets that message's results when they
   * come (see `ConnectionBounds.learn`).
   */
  begin(setLocal?: string, onAnswer?: (answer: unknown) => void): Promise<void>;
  /** Sends COMMIT, unless the transaction already ended with `queryAndCommit`. */
  commit(): Promise<void>;
  /** True once nothing is left to roll back: COMMIT was sent. */
  readonly ended: boolean;
  /** Set when COMMIT failed without an answer from the server: the connection is unusable. */
  readonly lost: Error | undefined;
}

/** What this module sends on its own: BEGIN, COMMIT (a `pg.Client`, structurally). */
interface SimpleQueryClient {
  query(text: string): Promise<unknown>;
}

/** The parts of a node-postgres client in pipeline mode this module uses. */
interface PipelineClient {
  pipeline?: unknown;
  connection?: { stream?: { cork?(): void; uncork?(): void } };
}

/** Whether node-postgres writes this client's statements without waiting for earlier answers. */
export function isPipelined(client: unknown): boolean {
  return (client as PipelineClient).pipeline === true;
}

/** BEGIN, the statements and COMMIT, each one waiting for the answer to the one before. */
export function sequentialSession<C extends SimpleQueryClient>(
  client: C,
  run: RunStatement<C>,
): TransactionSession<C> {
  return {
    tx: transactionOf(client, run),
    ended: false,
    lost: undefined,
    async begin(setLocal, onAnswer) {
      const answer = await client.query(beginText(setLocal));
      onAnswer?.(answer);
    },
    async commit() {
      try {
        await client.query('COMMIT');
      } catch (error) {
        throw commitFailure(error);
      }
    },
  };
}

function beginText(setLocal: string | undefined): string {
  return setLocal ? `BEGIN; ${setLocal}` : 'BEGIN';
}

/**
 * COMMIT's failure as the caller must read it: a server's answer (a SQLSTATE: a deferred
 * constraint, a serialization failure) means it rolled back; a connection lost while COMMIT was
 * in flight means nobody here knows (`CommitOutcomeUnknownError`).
 */
function commitFailure(error: unknown): unknown {
  if (sqlStateOf(error) !== undefined) return error;
  return classifyFailure(error).discardConnection ? new CommitOutcomeUnknownError(error) : error;
}

/**
 * BEGIN goes out with the first statement, and `queryAndCommit` sends the last statement with
 * COMMIT. node-postgres in pipeline mode writes a statement at once, each with its own Sync;
 * corking the socket puts the ones issued in the same turn of the event loop into one write.
 *
 * BEGIN is not awaited before the first statement. That is safe because BEGIN on a live
 * connection does not fail (it only warns inside a transaction, which a pool's idle connection is
 * not); when the connection dies, every statement behind it fails too.
 */
export function pipelinedSession<C extends SimpleQueryClient>(
  client: C,
  run: RunStatement<C>,
): TransactionSession<C> {
  const stream = (client as PipelineClient).connection?.stream;
  const cork = () => stream?.cork?.();
  const uncork = () => stream?.uncork?.();
  let begun: Promise<unknown> = Promise.resolve();
  let ended = false;
  let lost: Error | undefined;
  const ending = async (commit: Promise<unknown>) => {
    ended = true;
    try {
      await commit;
    } catch (error) {
      // A server's answer (with a SQLSTATE) leaves the connection usable; a cut socket does not.
      if (sqlStateOf(error) === undefined) lost = error as Error;
      throw commitFailure(error);
    }
  };

  const tx = transactionOf(client, run) as PipelinedTransaction<C>;
  tx[queryAndCommit] = async (
    text: string,
    params?: readonly unknown[],
    options?: QueryOptions,
  ): Promise<QueryResult> => {
    cork();
    let last: Promise<QueryResult>;
    let committed: Promise<unknown>;
    try {
      last = run(client, text, params, options);
      committed = client.query('COMMIT');
    } finally {
      uncork();
    }
    // Both are answered before either is reported, so no rejection is left unobserved.
    const [statement, commit] = await Promise.allSettled([last, ending(committed), begun]);
    // A failed statement aborted the transaction, and PostgreSQL answered COMMIT with a rollback.
    // Unless the connection died with both in flight: then they may both have run.
    if (statement.status === 'rejected') {
      throw lost !== undefined ? commitFailure(statement.reason) : statement.reason;
    }
    if (commit.status === 'rejected') throw commit.reason;
    return statement.value;
  };

  return {
    tx,
    get ended() {
      return ended;
    },
    get lost() {
      return lost;
    },
    async begin(setLocal, onAnswer) {
      cork();
      begun = client.query(beginText(setLocal));
      // Its failure (a lost connection) is reported by the statements behind it.
      begun.then(onAnswer, () => undefined);
      // The handler's first statement usually comes within this turn of the event loop (after
      // a few promise reactions): the socket stays corked until then, so BEGIN and it share one
      // write. A handler that waits for something else first sends BEGIN alone, a turn later.
      setImmediate(uncork);
    },
    async commit() {
      if (!ended) await ending(client.query('COMMIT'));
    },
  };
}

/**
 * `pipelinedSession` whose BEGIN waits for the transaction's first use (see
 * `transactionOnFirstUse`): a statement, reading `client`, or `begin()`. `open` sends BEGIN on
 * the inner session (with the bounds) and whatever must follow it at once (`onBegin`). Never
 * begun, the session has nothing to commit or roll back, and `queryAndCommit` sends its statement
 * alone, its own transaction.
 */
export function deferredSession<C extends SimpleQueryClient>(
  client: C,
  run: RunStatement<C>,
  open: (session: TransactionSession<C>) => void,
): TransactionSession<C> & { readonly tx: DeferredTransaction<C> & PipelinedTransaction<C> } {
  const inner = pipelinedSession(client, run);
  const real = inner.tx as PipelinedTransaction<C>;
  let begun = false;
  let lost: Error | undefined;
  const begin = () => {
    if (begun) return;
    begun = true;
    open(inner);
  };
  const tx: DeferredTransaction<C> & PipelinedTransaction<C> = {
    get client() {
      begin();
      return real.client;
    },
    query: (text, params, options) => {
      begin();
      return real.query(text, params, options);
    },
    get begun() {
      return begun;
    },
    begin,
    [queryAndCommit]: async (text, params, options) => {
      if (begun) return real[queryAndCommit](text, params, options);
      try {
        return await run(client, text, params, options);
      } catch (error) {
        // As at COMMIT: an answer rolled it back; a connection cut with it in flight, nobody knows.
        if (sqlStateOf(error) === undefined) lost = error as Error;
        throw commitFailure(error);
      }
    },
  };
  return {
    tx,
    get ended() {
      return begun ? inner.ended : true;
    },
    get lost() {
      return lost ?? inner.lost;
    },
    // BEGIN goes out with the first use, not here.
    begin: async () => undefined,
    async commit() {
      if (begun) await inner.commit();
    },
  };
}
