import { classifyFailure, driverFailureRules } from './failures.js';

/** Node's network error codes that mean "the other side may not have seen this; try again". */
export const retryableNetworkCodes: ReadonlySet<string> = new Set(
  driverFailureRules.filter((r) => r.driver === 'node' || r.driver === 'undici').map((r) => r.code!),
);

/**
 * Whether an error is worth a retry of the same intent with the same key: `classifyFailure` says
 * `transient` (nothing committed: serialization failures, deadlocks, lock and statement timeouts,
 * a lost or refused connection, `53300` too many clients, `25006` a read-only node after a
 * failover, a pool that gave no connection in time, …) or `unknown-outcome` (the COMMIT may have
 * happened: the retry reads the key and answers from it). An error can say so itself with a
 * boolean `retryable` property. Everything else is not. See docs/operations/reliability.md for the table.
 *
 * @example
 * if (isRetryable(error)) return reply.code(503).header('Retry-After', '1').send();
 */
export function isRetryable(error: unknown): boolean {
  return classifyFailure(error).kind !== 'permanent';
}
