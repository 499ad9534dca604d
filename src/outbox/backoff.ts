import { InvalidArgumentError } from '../core/errors.js';

/** Exponential backoff with jitter, shared by the dispatcher and the broker consumers. */
export interface BackoffPolicy {
  /** Delay before the first retry. Default 1000 ms. */
  baseMs?: number;
  /** Upper bound of any delay. Default 300000 ms (5 minutes). */
  maxMs?: number;
  /** Growth per attempt. Default 2. */
  factor?: number;
  /**
   * Fraction of the delay that is random, 0–1. Default 0.5 ("equal jitter": between half and the
   * whole delay), which spreads retries of many keys after a shared outage while keeping a floor.
   */
  jitter?: number;
}

export const defaultBackoff: Required<BackoffPolicy> = {
  baseMs: 1000,
  maxMs: 300_000,
  factor: 2,
  jitter: 0.5,
};

/** A function from the number of failed attempts (1 for the first failure) to a delay in ms. */
export type Backoff = (failedAttempts: number) => number;

export function createBackoff(policy: BackoffPolicy = {}, random: () => number = Math.random): Backoff {
  const p = { ...defaultBackoff, ...policy };
  if (!(p.baseMs >= 0 && p.maxMs >= p.baseMs && p.factor >= 1 && p.jitter >= 0 && p.jitter <= 1)) {
    throw new InvalidArgumentError(
      'backoff needs baseMs >= 0, maxMs >= baseMs, factor >= 1, 0 <= jitter <= 1',
    );
  }
  return (failedAttempts) => {
    const exponent = Math.max(0, failedAttempts - 1);
    const delay = Math.min(p.maxMs, p.baseMs * p.factor ** exponent);
    return Math.round(delay * (1 - p.jitter * random()));
  };
}
