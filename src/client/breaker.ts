import type { IBreaker } from 'cockatiel';
import type { Clock } from '../core/clock.js';
import { CircuitBreaker } from '../core/resilience/circuit-breaker.js';

/** Options of the circuit breaker at one downstream. */
export interface BreakerOptions {
  /**
   * When to open: a cockatiel breaker. Default `new ConsecutiveBreaker(5)`: five unhealthy
   * failures in a row (5xx except 501, 408, timeouts, network errors; not 4xx, not 429: see
   * `isUnhealthyStatus`). `new SamplingBreaker({ threshold, duration })` opens on a failure rate.
   */
  breaker?: IBreaker;
  /** How long it stays open before one probe is let through, in ms. Default 10000. */
  halfOpenAfterMs?: number;
}

/** What one attempt produced, as the breaker sees it: `unhealthy` outcomes count toward opening. */
export interface AttemptOutcome {
  unhealthy: boolean;
}

/**
 * One downstream's breaker: the core `CircuitBreaker` on the client's clock. Attempts never throw
 * (their errors come back inside the outcome), so the breaker counts outcomes flagged unhealthy.
 */
export class Breaker extends CircuitBreaker {
  constructor(origin: string, options: BreakerOptions & { clock?: Clock } = {}) {
    super(origin, options);
  }

  /**
   * Runs `attempt` through the breaker and returns its outcome; throws `CircuitOpenError`
   * without calling it while the circuit is open or a probe is in flight.
   */
  override execute<T>(
    attempt: () => Promise<T>,
    unhealthy: (outcome: { value: T } | { error: unknown }) => boolean = (o) =>
      'error' in o || (o.value as Partial<AttemptOutcome> | null)?.unhealthy === true,
  ): Promise<T> {
    return super.execute(attempt, unhealthy);
  }
}
