import { CircuitState, ConsecutiveBreaker, type IBreaker } from 'cockatiel';
import { systemClock, type Clock } from '../clock.js';
import { IdemError, isIdemError } from '../errors.js';
import { positive } from '../validate.js';

/** Options of a `CircuitBreaker`. */
export interface CircuitBreakerOptions {
  /**
   * When to open: a cockatiel breaker (the counting rule only; the open period and the probe run
   * on `clock`). Default `new ConsecutiveBreaker(5)`: five unhealthy outcomes in a row.
   * `new SamplingBreaker({ threshold, duration })` opens on a failure rate instead (it reads its
   * sampling window from `Date.now()`).
   */
  breaker?: IBreaker;
  /** How long it stays open before one probe is let through, in ms. Default 10000. */
  halfOpenAfterMs?: number;
  /** Time of the open period. Default: the system clock. */
  clock?: Clock;
}

export type CircuitBreakerState = 'closed' | 'open' | 'half-open';

/**
 * The circuit of `origin` is open (or a half-open probe is in flight): the call was not made.
 * Retryable later; `retryAfterMs` is when the breaker will let a probe through.
 */
export class CircuitOpenError extends IdemError {
  constructor(
    readonly origin: string,
    readonly retryAfterMs: number,
    cause?: unknown,
  ) {
    super('IDEM_CIRCUIT_OPEN', `circuit open for ${origin}: failing fast`, { cause, retryable: true });
  }
}

export const isCircuitOpen = (e: unknown): e is CircuitOpenError =>
  isIdemError(e) && e.code === 'IDEM_CIRCUIT_OPEN';

/**
 * One downstream's circuit breaker, on the injected clock: closed until the counting rule says
 * open; open for `halfOpenAfterMs`, failing fast; then half-open, where exactly one call (the
 * probe) reaches the downstream while the others fail fast; the probe's outcome closes or reopens
 * it. Outcomes are classified by the caller (`execute`'s `unhealthy`), so an answer such as a 503
 * counts without being thrown.
 */
export class CircuitBreaker {
  private readonly counter: IBreaker;
  private readonly clock: Clock;
  readonly halfOpenAfterMs: number;
  private current: CircuitBreakerState = 'closed';
  private openedAt = 0;
  private probing = false;
  private readonly listeners: ((state: CircuitBreakerState) => void)[] = [];

  constructor(
    readonly origin: string,
    options: CircuitBreakerOptions = {},
  ) {
    this.counter = options.breaker ?? new ConsecutiveBreaker(5);
    this.clock = options.clock ?? systemClock;
    this.halfOpenAfterMs = positive('halfOpenAfterMs', options.halfOpenAfterMs ?? 10_000);
  }

  /** closed, open or half-open (open past its period reads half-open: the next call probes). */
  get state(): CircuitBreakerState {
    if (this.current === 'open' && this.retryInMs() === 0) return 'half-open';
    return this.current;
  }

  /** Registers a listener for state changes (for metrics and logs). */
  onStateChange(listener: (state: CircuitBreakerState) => void): void {
    this.listeners.push(listener);
  }

  /** How long until a probe may go through, in ms; 0 when closed or due. */
  retryInMs(): number {
    if (this.current !== 'open') return 0;
    return Math.max(0, this.halfOpenAfterMs - (this.clock.now() - this.openedAt));
  }

  /**
   * Runs `attempt` through the breaker; throws `CircuitOpenError` without calling it while the
   * circuit is open or a probe is in flight. `unhealthy` says whether the outcome (a value, or a
   * thrown error) counts toward opening; by default a thrown error does and a value does not.
   */
  async execute<T>(
    attempt: () => Promise<T>,
    unhealthy: (outcome: { value: T } | { error: unknown }) => boolean = (o) => 'error' in o,
  ): Promise<T> {
    if (this.current === 'open') {
      const left = this.retryInMs();
      if (left > 0) throw new CircuitOpenError(this.origin, left);
      this.transition('half-open');
    }
    if (this.current === 'half-open') {
      if (this.probing) throw new CircuitOpenError(this.origin, 0);
      this.probing = true;
    }
    const probe = this.current === 'half-open';
    let failed: boolean;
    try {
      const value = await attempt();
      failed = unhealthy({ value });
      this.record(failed, probe);
      return value;
    } catch (error) {
      failed = unhealthy({ error });
      this.record(failed, probe);
      throw error;
    } finally {
      if (probe) this.probing = false;
    }
  }

  private record(failed: boolean, probe: boolean): void {
    const state = probe ? CircuitState.HalfOpen : CircuitState.Closed;
    if (!failed) {
      this.counter.success(state);
      if (probe) this.transition('closed');
      return;
    }
    if (this.counter.failure(state) || probe) {
      this.openedAt = this.clock.now();
      this.transition('open');
    }
  }

  private transition(state: CircuitBreakerState): void {
    if (this.current === state) return;
    this.current = state;
    for (const listener of this.listeners) listener(state);
  }
}
