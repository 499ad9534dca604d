/**
 * Time, injected. Expiry, leases and waits read this clock, so tests move time instead of sleeping.
 */
import { InvalidArgumentError } from './errors.js';

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /**
   * Resolves after `ms` milliseconds of this clock's time. When `signal` aborts first, it may
   * resolve early and drop its timer (the system clock and `ManualClock` do), so a cancelled wait
   * (a step's heartbeat after its call ended) keeps no timer alive. A clock that ignores `signal`
   * is still correct: the waiter checks the signal when the sleep ends.
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** The wall clock. */
export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal?.addEventListener('abort', done, { once: true });
    }),
};

/**
 * A clock that only moves when told to. `sleep` resolves once `advance` has moved time past its
 * deadline, so code that waits can be driven step by step.
 */
export class ManualClock implements Clock {
  private current: number;
  private sleepers: { until: number; resolve: () => void }[] = [];

  constructor(start = Date.UTC(2030, 0, 1)) {
    this.current = start;
  }

  now(): number {
    return this.current;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      // The abort listener goes when the sleep ends either way: a heartbeat sleeps on one signal
      // many times, and listeners left behind piled up (MaxListenersExceededWarning after 11 beats).
      const onAbort = () => {
        this.sleepers = this.sleepers.filter((s) => s !== sleeper);
        resolve();
      };
      const sleeper = {
        until: this.current + ms,
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      this.sleepers.push(sleeper);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Sleepers waiting for time to move (a test waits for a heartbeat to be armed this way). */
  get waiting(): number {
    return this.sleepers.length;
  }

  /** Moves time forward and wakes every sleeper whose deadline has passed. */
  advance(ms: number): void {
    this.current += ms;
    const due = this.sleepers.filter((s) => s.until <= this.current);
    this.sleepers = this.sleepers.filter((s) => s.until > this.current);
    for (const s of due) s.resolve();
  }
}

/** Converts a driver's timestamp (Date, ISO string or number) to epoch milliseconds. */
export function toMillis(value: unknown): number | null {
  if (value === null || value === undefined) return null;
  if (value instanceof Date) return value.getTime();
  if (typeof value === 'number') return value;
  if (typeof value === 'bigint') return Number(value);
  if (typeof value === 'string') return new Date(value).getTime();
  throw new InvalidArgumentError(`not a timestamp: ${typeof value}`);
}

/**
 * A clock that only moves when told to (`advance(ms)`): expiry, leases, backoff and retention in
 * tests without sleeping. Starts at `startMs` (default 2030-01-01T00:00:00Z).
 *
 * @example
 * const clock = createManualClock({ startMs: Date.now() });
 * const idem = createIdem({ sql, clock, leaseMs: 1000 });
 * clock.advance(1000); // the lease lapsed
 */
export function createManualClock(options: { startMs?: number } = {}): ManualClock {
  return new ManualClock(options.startMs);
}
