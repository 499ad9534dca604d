/**
 * idem/client: outgoing calls to downstream services. Key propagation (`Idempotency-Key` from
 * the current operation or step), failure classification, decorrelated-jitter retries inside a
 * retry budget, Retry-After, and a per-origin circuit breaker (cockatiel).
 */
export {
  createResilientClient,
  type ResilientClient,
  assertOk,
  type ClientOptions,
  type ClientRequestInit,
  type FetchLike,
  type RetryEvent,
} from './client.js';
export {
  classifyError,
  classifyResponse,
  isRetryableFailure,
  isRetryableStatus,
  type Classification,
} from '../core/resilience/classify.js';
export { parseRetryAfter } from '../core/resilience/retry-after.js';
export { isUnhealthyStatus } from '../core/resilience/http-failure.js';
export {
  createBackoff,
  resolveBackoff,
  type Backoff,
  type BackoffOptions,
  type ResolvedBackoff,
  type Jitter,
} from '../core/resilience/backoff.js';
export { createRetryBudget, type RetryBudget, type RetryBudgetOptions } from './retry-budget.js';
export type { Breaker, BreakerOptions } from './breaker.js';
export { retry, type RetryOptions } from './retry.js';
export { withIdempotencyKey, currentIdempotencyKey, subKey } from '../core/key-context.js';
export { CircuitOpenError, HttpStatusError, isCircuitOpen, isHttpStatusError } from './errors.js';
