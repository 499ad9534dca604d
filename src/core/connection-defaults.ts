/**
 * The settings idem gives every node-postgres connection it opens itself (the demo's pool, the
 * CLI's and the console's, the outbox dispatcher's LISTEN connection), and recommends for the
 * application's own pool (docs: operations, "Timeouts"): without them a failover or a silent
 * partition leaves connections "connecting" or waiting for an answer for ever, and nothing is
 * logged. Spread them into your own `new pg.Pool({ ...pgConnectionDefaults, connectionString })`.
 *
 * Client-side settings only: a server setting sent at connect (`statement_timeout` as a startup
 * parameter) is refused by PgBouncer ("unsupported startup parameter"), so the server-side bounds
 * are set where they work through any pooler, transaction-locally, by the adapters (see
 * core/transaction-timeouts.ts).
 *
 * How they fit together (the defaults in brackets): a duplicate waits on a key at most `waitMs`
 * [5 s], a statement-scoped `lock_timeout`; each statement of idem's transactions ends after the
 * transaction-local `statement_timeout` [10 s, or the stricter session value]; the client gives
 * up on an answer after `query_timeout` [15 s], longer, so that the server's clean cancel (57014,
 * connection kept) normally comes first and the client's own timer only fires when the link is
 * gone (the connection is then destroyed); a client that vanished inside a transaction holds its
 * key's row lock at most the transaction-local `idle_in_transaction_session_timeout` [15 s]; a
 * multi-step operation's lease [30 s] outlasts all of these, so a live holder is never taken over
 * because of a slow statement.
 */
export const pgConnectionDefaults = {
  /** Connect, and wait for a pooled connection, at most 5 s (pg's default: for ever). */
  connectionTimeoutMillis: 5_000,
  /** TCP keepalive from 10 s of idleness, so a peer that vanished is noticed on idle connections. */
  keepAlive: true,
  keepAliveInitialDelayMillis: 10_000,
  /**
   * The client's bound on any one statement's answer: 15 s. Above idem's transaction-local
   * `statement_timeout` (10 s), so the server's cancel comes first on a live link; when it fires,
   * the link is gone.
   */
  query_timeout: 15_000,
  /** Pooled connections idle for 10 s are closed. */
  idleTimeoutMillis: 10_000,
  /**
   * Pooled connections are replaced after 30 min, so after a failover or a scale-out the pool
   * spreads onto the current servers instead of keeping the connections it had.
   */
  maxLifetimeSeconds: 1_800,
} as const;
