import type { Clock } from '../core/clock.js';
import type { Backoff } from '../core/resilience/backoff.js';
import type { Sql } from '../core/sql.js';
import type { ClaimStatements } from './statements.js';

/**
 * What the claims' operations (enqueue, the holder's lease, the operator's tools) share: where the
 * tasks live, the clock, the statements, and the settings `createClaims` resolved. Built once by
 * `Claims`, so the operations' modules do not import the class.
 */
export interface ClaimsContext {
  readonly sql: Sql<unknown>;
  readonly clock: Clock;
  readonly statements: ClaimStatements;
  /** Names this process in `locked_by`. */
  readonly workerId: string;
  /** The lease a claim takes, unless the call says otherwise. */
  readonly leaseMs: number;
  /** Attempts a task gets, unless it was enqueued with its own. */
  readonly maxAttempts: number;
  /** The wait after a retryable failure, by attempt. */
  readonly backoff: Backoff;
  /** How long a finished task is kept. */
  readonly retentionMs: number;
}
