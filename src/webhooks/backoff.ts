/** Exponential backoff with jitter, shared by the processor and the sender. */

/** Options of `exponentialBackoff`. */
export interface BackoffOptions {
  /** Delay after the first failure, in ms. Default 5000. */
  baseMs?: number;
  /** Largest delay, in ms. Default 3 600 000 (one hour). */
  maxMs?: number;
  /**
   * Share of each delay that is random, 0–1. Default 0.5 ("equal jitter": half fixed, half
   * random), so retries of many receipts that failed together spread out instead of returning as
   * one burst.
   */
  jitter?: number;
}

/** The delay before the next try after `failures` failures (1 = after the first). */
export function exponentialBackoff(
  options: BackoffOptions,
  random: () => number,
): (failures: number) => number {
  const base = options.baseMs ?? 5000;
  const max = options.maxMs ?? 3_600_000;
  const jitter = Math.min(1, Math.max(0, options.jitter ?? 0.5));
  return (failures) => {
    const raw = Math.min(max, base * 2 ** Math.max(0, failures - 1));
    return Math.round(raw * (1 - jitter) + raw * jitter * random());
  };
}
