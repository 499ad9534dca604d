import { systemClock, type Clock } from '../core/clock.js';
import { unheardEvents, type IdemEvents } from '../core/event-channel.js';
import type { BackoffOptions } from '../core/resilience/backoff.js';
import { retryDelay } from '../core/resilience/retry-after.js';
import { sleepUnlessAborted } from '../core/resilience/sleep.js';
import { DecorrelatedJitter } from './backoff.js';
import { classifyError } from '../core/resilience/classify.js';
import type { RetryBudget } from './retry-budget.js';
import type {} from './client.js'; // the `client:retry` event

/** Options of `retry`. */
export interface RetryOptions {
  /** Attempts, the first included. Default 3. */
  maxAttempts?: number;
  /** Backoff between attempts. Default `{ strategy: 'decorrelated', baseMs: 100, maxMs: 10000 }`. */
  backoff?: BackoffOptions;
  /** Time source for the waits. Default: the system clock. */
  clock?: Clock;
  /** A budget shared with other callers; a spent budget ends the retries. Default: none. */
  budget?: RetryBudget;
  /**
   * Which errors are worth another attempt. Default: `classifyError(e).retryable` (PostgreSQL
   * 40001, 40P01, 55P03, 57014, 57P0x, class 08; Node network codes; timeouts; errors flagged
   * `retryable`, such as a retryable `HttpStatusError`).
   */
  isRetryable?: (error: unknown) => boolean;
  /**
   * The longest wait an error's `retryAfterMs` (a downstream's Retry-After) may ask for, in ms; a
   * longer ask is capped to it. Default 30000.
   */
  maxRetryAfterMs?: number;
  /**
   * Where every retry is reported before its wait, as a `client:retry` event (with `error`, the
   * attempt's throw). Default: none.
   */
  events?: IdemEvents;
  /** Stops waiting and gives up (rethrowing the last error) when aborted. */
  signal?: AbortSignal;
}

/**
 * Calls `fn` until it succeeds, fails with a non-retryable error, or runs out of attempts or
 * budget; rethrows the last error. Only for work that is safe to repeat: an idempotent call, or
 * one that carries the same idempotency key every time. `fn` gets the attempt number (1-based).
 */
export async function retry<T>(fn: (attempt: number) => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const maxAttempts = options.maxAttempts ?? 3;
  const clock = options.clock ?? systemClock;
  const isRetryable = options.isRetryable ?? ((e: unknown) => classifyError(e).retryable);
  const maxRetryAfterMs = options.maxRetryAfterMs ?? 30_000;
  const jitter = new DecorrelatedJitter(options.backoff);
  const events = options.events ?? unheardEvents;
  options.budget?.recordRequest();
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (error) {
      if (attempt >= maxAttempts || !isRetryable(error) || options.signal?.aborted) throw error;
      const asked = (error as { retryAfterMs?: unknown } | null)?.retryAfterMs;
      if (options.budget && !options.budget.tryRetry()) throw error;
      const delayMs = typeof asked === 'number' ? retryDelay(0, asked, maxRetryAfterMs) : jitter.next();
      if (events.has('client:retry')) {
        events.emit('client:retry', {
          attempt,
          delayMs,
          reason: classifyError(error).reason,
          fromRetryAfter: typeof asked === 'number',
          error,
        });
      }
      await sleepUnlessAborted(clock, delayMs, options.signal);
      if (options.signal?.aborted) throw error;
    }
  }
}
