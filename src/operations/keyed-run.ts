/**
 * What both recording strategies of a keyed operation (`run`, `runIn`) share: the read in front,
 * how a key's existing row is settled, the bounded wait on its index entry, and `run`'s attempts
 * at its transaction. The strategies themselves are commit-recording.ts (the record as the
 * handler transaction's last statement) and claim-first.ts (a claim before the handler).
 */
import type { Clock } from '../core/clock.js';
import { isCommitOutcomeUnknown, isIdemError, isPreparedStatementsUnsupported } from '../core/errors.js';
import type { OperationScope } from '../core/errors.js';
import { classifyFailure } from '../core/failures.js';
import { deriveKey } from '../core/keys.js';
import { createBackoff } from '../core/resilience/backoff.js';
import { isRetryable } from '../core/retryable.js';
import type { Queryable, Sql, Transaction } from '../core/sql.js';
import { isTransactionRetryable, SqlState, sqlStateOf } from '../core/sqlstate.js';
import type { OperationResult, Outcome } from './outcome.js';
import type { PreparedSpec } from './prepared-spec.js';
import type { ReplayReadPolicy } from './replay-read.js';
import type { RequestRow } from './request-row.js';
import { decide, inProgress } from './resolve-existing.js';
import type { RequestStatements } from './statements.js';

/** Passed to a handler beside the transaction. */
export interface OperationContext {
  scope: OperationScope;
  /** A key for downstream calls, derived from this intent and `name`; stable across retries. */
  deriveKey(name: string): string;
}

export type Handler<T, TxClient> = (
  tx: Transaction<TxClient>,
  context: OperationContext,
) => Promise<T | Outcome<T>>;

/** One way of recording a keyed operation's key (`IdemOptions.recording`). */
export interface RecordingStrategy<Client> {
  /** `idem.run`: in a transaction idem opens (and tries again, see `attempts`). */
  run<T>(prepared: PreparedSpec, handler: Handler<T, Client>): Promise<OperationResult<T>>;
  /** `idem.runIn`: inside the caller's transaction, which the caller ends. */
  runIn<T, TxClient>(
    tx: Transaction<TxClient>,
    prepared: PreparedSpec,
    handler: Handler<T, TxClient>,
  ): Promise<OperationResult<T>>;
}

/** What the recording strategies work with, from the `Idem` that holds them. */
export interface KeyedEngine<Client> {
  sql: Sql<Client>;
  clock: Clock;
  statements: RequestStatements;
  replayRead: ReplayReadPolicy;
}

export function contextOf(scope: OperationScope): OperationContext {
  return { scope, deriveKey: (name) => deriveKey(scope, name) };
}

/** The bounded wait on a key's index entry, as a PostgreSQL interval string for `lock_timeout`. */
export function waitInterval(prepared: PreparedSpec, now: number, deadline = now + prepared.waitMs): string {
  return `${Math.ceil(Math.max(1, deadline - now))}ms`;
}

/** Runs a statement that waits on the key's index entry; a lock timeout means in progress. */
export async function bounded<R>(
  clock: Clock,
  prepared: PreparedSpec,
  statement: () => Promise<R>,
): Promise<R> {
  try {
    return await statement();
  } catch (error) {
    if (sqlStateOf(error) === SqlState.lockNotAvailable) {
      throw inProgress(prepared.scope, null, clock.now(), error);
    }
    throw error;
  }
}

/**
 * What an existing row answers: its replay, or its refusal (thrown); a pending row is waited
 * for until `deadline`. Null: there is no row (any more), or its tombstone passed: run afresh.
 */
export async function settle<T>(
  engine: KeyedEngine<unknown>,
  db: Queryable,
  prepared: PreparedSpec,
  found: RequestRow | null,
  deadline: number,
): Promise<OperationResult<T> | null> {
  const { scope } = prepared;
  const { clock, statements } = engine;
  for (let row = found; row; row = await statements.read(db, { scope })) {
    const now = clock.now();
    const decision = decide<T>(scope, row, prepared.fingerprint, now);
    if (decision.kind === 'replay') return decision.result;
    if (decision.kind === 'forgotten') return null;
    // A committed pending row belongs to a multi-step execution: wait for it, boundedly.
    if (now >= deadline) throw inProgress(scope, row, now);
    await clock.sleep(Math.min(50, deadline - now));
  }
  return null;
}

/**
 * The read in front, when the operation's `readFirst` asks for it: a finished key's stored
 * result; 'row' when the key has a row that does not settle the call (one past its tombstone);
 * null otherwise (no read, or no row).
 */
export function replayInFront<T>(
  engine: KeyedEngine<unknown>,
  db: Queryable,
  prepared: PreparedSpec,
  deadline: number,
): Promise<OperationResult<T> | 'row' | null> {
  const { scope } = prepared;
  if (!engine.replayRead.shouldRead(scope.operation, prepared.readFirst)) return Promise.resolve(null);
  // Promise callbacks, not async functions: a replay is this read and little else, and each
  // layer of promises costs it more than its SQL (see `observe`).
  return engine.statements.read(db, { scope }).then((row) => {
    if (!row) return null;
    engine.replayRead.observe(scope.operation, true);
    // A finished row decides at once; only a pending one is waited for (`settle`).
    const decision = decide<T>(scope, row, prepared.fingerprint, engine.clock.now());
    if (decision.kind === 'replay') return decision.result;
    if (decision.kind === 'forgotten') return 'row';
    return settle<T>(engine, db, prepared, row, deadline).then((settled) => settled ?? 'row');
  });
}

/**
 * `replayInFront` for `run`, outside any transaction: a finished key is answered by one indexed
 * read. The read only saves a transaction: one that met a connection that just went away (a
 * failover, a restarted pooler, a terminated backend) is skipped (null), and the transaction runs
 * on another connection and does the same work without it.
 */
export function replayBeforeTransaction<T>(
  engine: KeyedEngine<unknown>,
  prepared: PreparedSpec,
  deadline: number,
): Promise<OperationResult<T> | 'row' | null> {
  return replayInFront<T>(engine, engine.sql, prepared, deadline).then(undefined, (error: unknown) => {
    if (isIdemError(error) || !isRetryable(error)) throw error;
    return null;
  });
}

/** Whether the read in front answered the call. */
export function isAnswer<T>(front: OperationResult<T> | 'row' | null): front is OperationResult<T> {
  return typeof front === 'object' && front !== null;
}

/** From `Attempts.recover`: run afresh at once, without counting it as a retry of a failure. */
export const runAfresh = Symbol('run afresh');

/** One attempt at `run`'s transaction, and what a strategy makes of its failure. */
export interface Attempts<T> {
  /** Opens the transaction and runs the attempt in it. */
  attempt: () => Promise<OperationResult<T>>;
  /**
   * After a failed attempt, before the retry policy: the answer (from the key's row), `runAfresh`,
   * or undefined to leave the failure to the retry policy.
   */
  recover?: (error: unknown) => Promise<OperationResult<T> | typeof runAfresh | undefined>;
}

/**
 * `run`'s transaction, attempted until it settles: a result (whose replay the read-in-front
 * policy learns from), a recovery, or a failure that `worthAnotherAttempt` leaves to the caller
 * after `transactionRetries` retries.
 */
export async function attempts<T>(
  engine: KeyedEngine<unknown>,
  prepared: PreparedSpec,
  { attempt, recover }: Attempts<T>,
): Promise<OperationResult<T>> {
  for (let n = 0; ; n++) {
    try {
      const result = await attempt();
      engine.replayRead.observe(prepared.scope.operation, result.replayed);
      return result;
    } catch (error) {
      const recovered = recover ? await recover(error) : undefined;
      if (recovered === runAfresh) continue;
      if (recovered) return recovered;
      if (n < prepared.transactionRetries && worthAnotherAttempt(error, n)) {
        await engine.clock.sleep(backoff(n + 1));
        continue;
      }
      throw error; // classified by `run`
    }
  }
}

/**
 * Whether `run` tries its transaction again itself, rather than hand the failure to the caller:
 * - a serialization failure or deadlock (rolled back: the same attempt again succeeds);
 * - a pooler's prepared-statement refusal (rolled back, and `fromPg` now sends statements
 *   unnamed);
 * - COMMIT's outcome unknown (the connection died with COMMIT in flight): the next attempt
 *   reads the key, or its record meets the committed row, and answers from it; when nothing
 *   committed it runs afresh. The key's unique constraint makes both safe;
 * - once, a connection lost before COMMIT (a pooled connection a failover or a restarted pooler
 *   had cut): nothing committed, and the pool's next connection is a new one.
 * Timeouts, a full server (53300) or a read-only node (25006) are not retried here: each attempt
 * would wait as long again. The caller gets a retryable error (HTTP: 503 with Retry-After).
 */
function worthAnotherAttempt(error: unknown, attempt: number): boolean {
  if (isTransactionRetryable(error) || isPreparedStatementsUnsupported(error)) return true;
  if (isCommitOutcomeUnknown(error)) return true;
  if (attempt > 0 || sqlStateOf(error) !== undefined) return false;
  const failure = classifyFailure(error);
  return failure.kind === 'transient' && failure.discardConnection && !failure.timedOut;
}

// Exponential from 20 ms, jitter 0.75 (a delay in [d/4, d]: 5–20 ms, 10–40 ms, …): keeps retried
// deadlock victims from colliding again.
const backoff = createBackoff({ baseMs: 20, jitter: 0.75 }, {});
