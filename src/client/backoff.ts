import { decorrelatedJitterGenerator, halfJitterGenerator, type IExponentialBackoffOptions } from 'cockatiel';

/**
 * Delay before retry number `attempt` (1 = the first retry) when only the attempt count is
 * known, as with a failure counter stored in a row: "equal jitter", a random time in
 * [d/2, d] with d = min(base · 2^(attempt−1), max). The lower half keeps a minimum spacing,
 * the upper half spreads competing retries apart.
 */
export function persistedBackoff(attempt: number, baseMs: number, maxMs: number): number {
  const exponent = Math.min(Math.max(attempt - 1, 0), 30);
  // cockatiel's halfJitterGenerator is exactly this, with the attempt count as its state.
  const [delay] = halfJitterGenerator(exponent, {
    generator: halfJitterGenerator,
    initialDelay: baseMs,
    maxDelay: maxMs,
    exponent: 2,
  });
  return Math.round(delay);
}

/** Options of an in-process decorrelated-jitter backoff. */
export interface JitterOptions {
  /** The first delay's scale, in ms. Default 100. */
  initialDelayMs?: number;
  /** No delay exceeds this, in ms. Default 10000. */
  maxDelayMs?: number;
}

/**
 * An in-process backoff with decorrelated jitter (Polly's "DecorrelatedJitterV2", as shipped in
 * cockatiel): each call of `next()` returns the next delay. Used where retries happen inside one
 * call, so the generator's state can live in memory.
 */
export class DecorrelatedJitter {
  private state: [number, number] | undefined;
  private readonly options: IExponentialBackoffOptions<[number, number]>;

  constructor(options: JitterOptions = {}) {
    this.options = {
      generator: decorrelatedJitterGenerator,
      initialDelay: options.initialDelayMs ?? 100,
      maxDelay: options.maxDelayMs ?? 10_000,
      exponent: 2,
    };
  }

  next(): number {
    const [delay, state] = decorrelatedJitterGenerator(this.state, this.options);
    this.state = state;
    return Math.round(delay);
  }
}
