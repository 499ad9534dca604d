/**
 * The bounds idem puts on every transaction it opens itself (docs/principles.md, 12: no
 * transaction of idem's can sit idle holding locks), set transaction-locally so they never leak
 * into a pooled session:
 *
 * - `statement_timeout` bounds each statement, the handler's included: a statement stuck behind a
 *   lock nobody releases, or a runaway query, ends with `57014` (transient) instead of holding the
 *   key's row for ever;
 * - `idle_in_transaction_session_timeout` ends a session whose client went silent inside the
 *   transaction (a partition, a process frozen or killed without a FIN): PostgreSQL rolls it back
 *   and frees the key's row lock, so a retry of the same key is not refused as "in progress" for
 *   the minutes TCP needs to notice.
 *
 * The adapters that open transactions (`fromPg`, `fromPostgresJs`, the ORM adapters) apply them in
 * the cheapest form the driver allows (see each adapter).
 */
import { InvalidArgumentError } from './errors.js';

/** Bounds on idem's own transactions. 0 leaves the session's own setting in force. */
export interface TransactionTimeouts {
  /**
   * `statement_timeout` for each statement of the transaction, in ms. Default 10 000. Keep it
   * above `waitMs` (the bounded wait on a key held by a concurrent execution, 5 s by default), so
   * such a wait ends as "in progress" (409) rather than as a cancel, and below the client's
   * `query_timeout` (`pgConnectionDefaults`: 15 s), so the server's clean cancel comes first. A
   * handler that needs longer sets its own (`SET LOCAL statement_timeout = …` in its
   * transaction); `migrate` lifts it for its own transaction.
   */
  statementMs?: number;
  /**
   * `idle_in_transaction_session_timeout`, in ms: how long the transaction may wait for its
   * client's next statement. Default 15 000. Keep it above the longest pause a handler makes
   * inside its transaction; it bounds how long a client that vanished keeps the key locked.
   */
  idleMs?: number;
}

export const defaultTransactionTimeouts: Required<TransactionTimeouts> = {
  statementMs: 10_000,
  idleMs: 15_000,
};

/** The timeouts to apply, or null for none. */
export function resolveTransactionTimeouts(
  option: TransactionTimeouts | false | undefined,
): Required<TransactionTimeouts> | null {
  if (option === false) return null;
  const resolved = { ...defaultTransactionTimeouts, ...option };
  for (const [name, value] of Object.entries(resolved)) {
    if (!Number.isInteger(value) || value < 0) {
      throw new InvalidArgumentError(`timeouts.${name} must be an integer number of ms ≥ 0`);
    }
  }
  return resolved.statementMs === 0 && resolved.idleMs === 0 ? null : resolved;
}

/**
 * One SELECT that sets the bounds for the rest of the transaction (`set_config(…, true)` is
 * `SET LOCAL`), each to the stricter of idem's value and the one already in force: idem never
 * loosens a bound the role, the database or the pool's connections set (a session value of 0,
 * no bound, takes idem's). The values are integers rendered by idem, never user text. The pg and
 * postgres.js adapters send it in the same simple-protocol message as BEGIN.
 */
export function setLocalTimeouts(timeouts: Required<TransactionTimeouts>): string {
  const parts: string[] = [];
  if (timeouts.statementMs > 0) parts.push(stricter('statement_timeout', timeouts.statementMs));
  if (timeouts.idleMs > 0) parts.push(stricter('idle_in_transaction_session_timeout', timeouts.idleMs));
  return `SELECT ${parts.join(', ')}`;
}

function stricter(setting: string, ms: number): string {
  // current_setting gives '0', '500ms', '30s', '2min': all valid interval literals.
  const current = `nullif((extract(epoch FROM current_setting('${setting}')::interval) * 1000)::bigint, 0)`;
  return `set_config('${setting}', least(coalesce(${current}, ${ms}), ${ms})::text, true) AS ${setting}`;
}

/** The settings `setLocalTimeouts` sets, as its answer names them. */
const boundSettings = ['statement_timeout', 'idle_in_transaction_session_timeout'] as const;

/**
 * The bounds of the transactions on each connection of a pool. The first transaction on a
 * connection sends `setLocalTimeouts` (a SELECT of set_config, which computes the stricter values
 * from the session's own); its answer holds those values, and every later transaction on that
 * connection sends them as plain `SET LOCAL`s: utility statements, parsed but never planned. The
 * SELECT, in the simple protocol, was parsed and planned again for every transaction: 145–235 µs
 * of machine CPU per BEGIN … COMMIT against 83–100 µs with the `SET LOCAL`s and 63–80 µs for
 * BEGIN alone (8 connections, 4,000 transactions each, side by side, 2 cores).
 *
 * The session's values are read once per connection: those of the role, the database and the
 * connection's startup options, which do not change while it is open. A session-level `SET` of
 * either setting made later on a pooled connection is not seen by idem's bounds.
 */
export class ConnectionBounds {
  /** Per connection (a driver's client object), the `SET LOCAL`s learned from its first answer. */
  private readonly learned = new WeakMap<object, string>();
  private readonly first: string;

  constructor(timeouts: Required<TransactionTimeouts>) {
    this.first = setLocalTimeouts(timeouts);
  }

  /** What to send with BEGIN on `connection`. */
  textFor(connection: object): string {
    return this.learned.get(connection) ?? this.first;
  }

  /**
   * Reads the answer `connection` gave to `textFor` (the results of `BEGIN; SELECT …`, or of the
   * SELECT alone): the values it set, sent as `SET LOCAL`s from then on. Anything else is ignored.
   */
  learn(connection: object, answer: unknown): void {
    if (this.learned.has(connection)) return;
    const results = Array.isArray(answer) ? (answer as unknown[]) : [answer];
    const row = (results.at(-1) as { rows?: Record<string, unknown>[] } | undefined)?.rows?.[0];
    if (!row) return;
    const sets: string[] = [];
    for (const setting of boundSettings) {
      const value = row[setting];
      // set_config answers the value as SHOW prints it ('10s', '1234ms', '0'): anything else (or
      // an answer without both settings) is not cached, so no bound is ever dropped and nothing but
      // a number and a unit is ever sent back.
      if (typeof value !== 'string' || !/^\d{1,12}(?:us|ms|s|min|h|d)?$/.test(value)) return;
      sets.push(`SET LOCAL ${setting} = '${value}'`);
    }
    this.learned.set(connection, sets.join('; '));
  }
}
