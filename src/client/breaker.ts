import {
  BrokenCircuitError,
  circuitBreaker,
  CircuitState,
  ConsecutiveBreaker,
  handleWhenResult,
  type CircuitBreakerPolicy,
  type IBreaker,
} from 'cockatiel';
import { CircuitOpenError } from './errors.js';

/** Options of the circuit breaker at one downstream. */
export interface BreakerOptions {
  /**
   * When to open: a cockatiel breaker. Default `new ConsecutiveBreaker(5)`: five unhealthy
   * failures in a row (5xx except 501, 408, timeouts, network errors; not 4xx, not 429).
   * `new SamplingBreaker({ threshold, duration })` opens on a failure rate instead.
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
 * One downstream's breaker: cockatiel's `CircuitBreakerPolicy` (state machine, consecutive or
 * sampling counts, half-open probe). What this adds: while the probe is in flight, other calls
 * fail fast with `CircuitOpenError` instead of queueing behind the probe as cockatiel does, so
 * "one probe" means one request reaches the downstream; and an open circuit is reported as a
 * typed, retryable error with the time until the next probe.
 *
 * cockatiel reads `Date.now()` for the open period (it has no clock option), so tests move time
 * with fake timers for `Date` only.
 */
export class Breaker {
  private readonly policy: CircuitBreakerPolicy;
  private readonly halfOpenAfterMs: number;
  private openedAt = 0;

  constructor(
    readonly origin: string,
    options: BreakerOptions = {},
  ) {
    this.halfOpenAfterMs = options.halfOpenAfterMs ?? 10_000;
    this.policy = circuitBreaker(
      // Attempts never throw (their errors come back inside the outcome), so the breaker counts
      // results: an unhealthy one is a failure, anything else a success.
      handleWhenResult((outcome) => (outcome as AttemptOutcome).unhealthy),
      {
        halfOpenAfter: this.halfOpenAfterMs,
        breaker: options.breaker ?? new ConsecutiveBreaker(5),
      },
    );
    this.policy.onBreak(() => {
      this.openedAt = Date.now();
    });
  }

  /** closed, open, half-open or isolated. */
  get state(): 'closed' | 'open' | 'half-open' | 'isolated' {
    switch (this.policy.state) {
      case CircuitState.Closed:
        return 'closed';
      case CircuitState.Open:
        return 'open';
      case CircuitState.HalfOpen:
        return 'half-open';
      default:
        return 'isolated';
    }
  }

  /** Registers a listener for state changes (for metrics and logs). */
  onStateChange(listener: (state: Breaker['state']) => void): void {
    this.policy.onStateChange(() => listener(this.state));
  }

  /**
   * Runs `attempt` through the breaker and returns its outcome; throws `CircuitOpenError`
   * without calling it while the circuit is open or a probe is in flight.
   */
  async execute<T extends AttemptOutcome>(attempt: () => Promise<T>): Promise<T> {
    if (this.policy.state === CircuitState.HalfOpen) {
      throw new CircuitOpenError(this.origin, 0);
    }
    try {
      return await this.policy.execute(attempt);
    } catch (error) {
      if (error instanceof BrokenCircuitError) {
        const left = Math.max(0, this.halfOpenAfterMs - (Date.now() - this.openedAt));
        throw new CircuitOpenError(this.origin, left, error);
      }
      throw error;
    }
  }
}
