import { resolveBackoff, type BackoffOptions } from './backoff.js';

/** The in-process retries' default: decorrelated jitter from 100 ms, never above 10 s. */
export const inProcessBackoff: BackoffOptions = { strategy: 'decorrelated', baseMs: 100, maxMs: 10_000 };

/**
 * An in-process backoff sequence: each call of `next()` returns the next delay. Decorrelated
 * jitter (Polly's "DecorrelatedJitterV2") unless `options` names another strategy.
 */
export class DecorrelatedJitter {
  private readonly sequence: { next(): number };

  constructor(options?: BackoffOptions, random?: () => number) {
    this.sequence = resolveBackoff(options, inProcessBackoff, random).sequence();
  }

  next(): number {
    return this.sequence.next();
  }
}
