import type { Clock } from '../../../src/core/clock.js';

/**
 * A test clock whose `sleep` moves time forward at once (backoff waits cost nothing, and their
 * lengths are recorded), and that a test moves explicitly to let a lease lapse. A cancellable
 * sleep (one given a signal: a call's heartbeat) never moves time by itself: it waits until it is
 * cancelled, so a heartbeat neither spins nor races the test's own moves of the clock.
 */
export class SteppingClock implements Clock {
  readonly sleeps: number[] = [];
  constructor(private current = Date.UTC(2032, 0, 1)) {}
  now(): number {
    return this.current;
  }
  async sleep(ms: number, signal?: AbortSignal): Promise<void> {
    if (signal) {
      if (signal.aborted) return;
      return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
    }
    this.sleeps.push(ms);
    this.current += Math.max(0, ms);
  }
  advance(ms: number): void {
    this.current += ms;
  }
}
