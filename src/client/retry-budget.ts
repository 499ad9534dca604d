import { systemClock, type Clock } from '../core/clock.js';

/** Options of a retry budget. */
export interface RetryBudgetOptions {
  /**
   * Retries allowed as a fraction of first attempts in the window. Default 0.2: under a full
   * outage the downstream sees at most 1.2× the normal load, instead of `maxAttempts`×.
   */
  ratio?: number;
  /** Retries always allowed per second, so a quiet client can still retry. Default 10. */
  minPerSecond?: number;
  /** The sliding window, in ms. Default 10000. */
  windowMs?: number;
  /** Time source. Default: the system clock. */
  clock?: Clock;
}

/**
 * A retry budget (as in Finagle and gRPC retry throttling; cockatiel has none): retries are
 * capped at `minPerSecond` plus `ratio` × first attempts over a sliding window, counted in
 * one-second buckets. Attempt limits bound one call; a budget bounds the whole client, so a
 * failing downstream is not hit by a retry storm from every caller at once.
 */
export class RetryBudget {
  private readonly ratio: number;
  private readonly minPerSecond: number;
  private readonly buckets: { second: number; requests: number; retries: number }[];
  private readonly clock: Clock;

  constructor(options: RetryBudgetOptions = {}) {
    this.ratio = options.ratio ?? 0.2;
    this.minPerSecond = options.minPerSecond ?? 10;
    const seconds = Math.max(1, Math.round((options.windowMs ?? 10_000) / 1000));
    this.buckets = Array.from({ length: seconds }, () => ({ second: -1, requests: 0, retries: 0 }));
    this.clock = options.clock ?? systemClock;
  }

  /** Counts a first attempt. */
  recordRequest(): void {
    this.bucket().requests++;
  }

  /** Takes one retry from the budget; false when it is spent (do not retry). */
  tryRetry(): boolean {
    const current = this.bucket();
    const second = current.second;
    let requests = 0;
    let retries = 0;
    for (const b of this.buckets) {
      if (b.second > second - this.buckets.length) {
        requests += b.requests;
        retries += b.retries;
      }
    }
    if (retries + 1 > this.minPerSecond * this.buckets.length + this.ratio * requests) return false;
    current.retries++;
    return true;
  }

  private bucket() {
    const second = Math.floor(this.clock.now() / 1000);
    const b = this.buckets[second % this.buckets.length]!;
    if (b.second !== second) {
      b.second = second;
      b.requests = 0;
      b.retries = 0;
    }
    return b;
  }
}

/**
 * A retry budget to share between clients (`createResilientClient({ retryBudget })`), so that
 * together they retry at most `ratio` of their requests.
 *
 * @example
 * const retryBudget = createRetryBudget({ ratio: 0.1 });
 * const payments = createResilientClient({ baseUrl: paymentsUrl, retryBudget });
 */
export function createRetryBudget(options: RetryBudgetOptions = {}): RetryBudget {
  return new RetryBudget(options);
}
