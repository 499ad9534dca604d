/**
 * The business transaction bounded by the invocation's deadline (`boundByDeadline`).
 *
 * Lambda ends an invocation at its deadline whatever the function is doing; without a bound a
 * statement waiting on a lock runs into "Task timed out" (no answer, the writes' fate unknown to
 * the caller), and a container that stops with the transaction open leaves the key's row lock to
 * the server's TCP keepalive (two hours by default) — every retry of that key waits in between.
 * Both settings are `SET LOCAL` (set_config's third argument), so they end with the transaction
 * and a pooled connection, or PgBouncer's server connection in transaction mode, goes back as it
 * came. They tighten the bounds every transaction of idem's has (`timeouts` of the adapters, see
 * core/transaction-timeouts.ts) to what the invocation has left.
 */
import type { Queryable } from '../core/sql.js';
import { setLocalTimeouts } from '../core/transaction-timeouts.js';
import type { LambdaContext } from './types.js';

/** The two bounds, in ms. */
export interface TransactionBounds {
  /** Any one statement: the remaining time less the reserve, so the function can still answer. */
  readonly statementMs: number;
  /** Idle inside the transaction: the remaining time; past it the server ends the session. */
  readonly idleMs: number;
}

/**
 * The bounds for an invocation, or `undefined` when its context cannot tell its remaining time
 * (a local call without a Lambda context): then nothing is set and nothing costs a round trip.
 */
export function boundsOf(
  context: LambdaContext | undefined,
  reserveMs: number,
): TransactionBounds | undefined {
  const remaining =
    typeof context?.getRemainingTimeInMillis === 'function' ? context.getRemainingTimeInMillis() : NaN;
  if (!Number.isFinite(remaining)) return undefined;
  // 0 would mean "no timeout" to PostgreSQL: at least 1 ms, so an exhausted budget fails fast.
  const idleMs = Math.max(1, Math.floor(remaining));
  return { statementMs: Math.max(1, Math.floor(remaining - reserveMs)), idleMs };
}

/** Sets the bounds on the transaction `tx`, before the handler's first statement. */
export async function boundTransactionBy(tx: Queryable, bounds: TransactionBounds): Promise<void> {
  // The adapters' own transaction bounds (`timeouts`, 10 s and 15 s by default) are set the same
  // way at BEGIN; each setting becomes the stricter of the deadline's and the one in force, so a
  // tighter bound of idem's, the role's or the database's is kept. Sent unnamed: its integers
  // change with every invocation, and PgBouncer in transaction mode (prepare: false) needs it so.
  await tx.query(setLocalTimeouts({ statementMs: bounds.statementMs, idleMs: bounds.idleMs }));
}
