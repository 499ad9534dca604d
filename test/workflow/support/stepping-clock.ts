import type { Clock } from '../../../src/core/clock.js';

/**
 * A test clock whose `sleep` moves time forward at once (backoff waits cost nothing, and their
 * lengths are recorded), and that a test moves explicitly to let a lease lapse.
 */
export class SteppingClock implements Clock {
  readonly sleeps: number[] = [];
  constructor(private current = Date.UTC(2032, 0, 1)) {}
  now(): number {
    return this.current;
  }
  async sleep(ms: number): Promise<void> {
    this.sleeps.push(ms);
    this.current += Math.max(0, ms);
  }
  advance(ms: number): void {
    this.current += ms;
  }
}
