import { ConsecutiveBreaker } from 'cockatiel';
import { describe, expect, it } from 'vitest';
import { createManualClock } from 'idem/testing';
import { systemClock } from 'idem';
import {
  createBackoff,
  isCircuitOpen,
  isRetryableStatus,
  isUnhealthyStatus,
  parseRetryAfter,
  resolveBackoff,
} from 'idem/client';
import { CircuitBreaker } from '../../src/core/resilience/circuit-breaker.js';
import { retryDelay } from '../../src/core/resilience/retry-after.js';
import { sleepUnlessAborted } from '../../src/core/resilience/sleep.js';

const now = Date.UTC(2031, 0, 1);

describe('Retry-After', () => {
  it('reads delay-seconds and the three HTTP-date forms', () => {
    expect(parseRetryAfter('0', now)).toBe(0);
    expect(parseRetryAfter(' 120 ', now)).toBe(120_000);
    expect(parseRetryAfter('Wed, 01 Jan 2031 00:00:30 GMT', now)).toBe(30_000); // IMF-fixdate
    expect(parseRetryAfter('Wednesday, 01-Jan-31 00:00:30 GMT', now)).toBe(30_000); // RFC 850
    expect(parseRetryAfter('Wed Jan  1 00:00:30 2031', now)).toBe(
      30_000 + new Date(now).getTimezoneOffset() * 60_000,
    ); // asctime, local
    expect(parseRetryAfter('Tue, 31 Dec 2030 23:00:00 GMT', now)).toBe(0); // in the past: now
  });

  it('refuses what is neither: "1.5" is not a date in 2001 (a 0 ms wait)', () => {
    expect(Number.isNaN(Date.parse('1.5'))).toBe(false); // what the guard is for
    for (const value of ['1.5', '-1', '1e3', 'soon', '', '   ', null, undefined]) {
      expect(parseRetryAfter(value, now)).toBeUndefined();
    }
    expect(parseRetryAfter('99999999999999999999', now)).toBeUndefined(); // not a safe integer
  });

  it('maxRetryAfterMs caps the ask; the backoff is a floor', () => {
    expect(retryDelay(1000, undefined, 5000)).toBe(1000);
    expect(retryDelay(1000, 3000, 5000)).toBe(3000);
    expect(retryDelay(1000, 120_000, 5000)).toBe(5000);
    expect(retryDelay(8000, 3000, 5000)).toBe(8000);
  });
});

describe('backoff', () => {
  const at = (random: number) => () => random;
  const lowest = 0.999999;

  it('exponential: d = min(max, base · factor^(n−1)); full [0, d], equal [d/2, d], j [d(1−j), d]', () => {
    const curve = { baseMs: 100, maxMs: 1000 };
    const none = createBackoff({ ...curve, jitter: 'none' }, {});
    expect([1, 2, 3, 4, 5, 6].map(none)).toEqual([100, 200, 400, 800, 1000, 1000]);
    for (const [jitter, low] of [
      ['full', 0],
      ['equal', 0.5],
      [0.75, 0.25],
    ] as const) {
      expect([1, 2, 5].map(createBackoff({ ...curve, jitter }, {}, at(0)))).toEqual([100, 200, 1000]);
      expect([1, 2, 5].map(createBackoff({ ...curve, jitter }, {}, at(lowest)))).toEqual(
        [100, 200, 1000].map((d) => Math.round(d * low)),
      );
    }
    expect(createBackoff({ baseMs: 10, factor: 3, jitter: 'none' }, {})(3)).toBe(90);
    expect(() => createBackoff({ baseMs: 10, maxMs: 5 }, {})).toThrow(/maxMs/);
    expect(() => createBackoff({ jitter: 2 }, {})).toThrow(/jitter/);
  });

  it('schedule: the listed delays, the last repeating; numeric jitter is ± around them', () => {
    const schedule = createBackoff({ delaysMs: [1000, 5000] }, {});
    expect([1, 2, 3, 9].map(schedule)).toEqual([1000, 5000, 5000, 5000]);
    const spread = { delaysMs: [1000], jitter: 0.2 };
    expect(createBackoff(spread, {}, at(0))(1)).toBe(800);
    expect(createBackoff(spread, {}, at(0.5))(1)).toBe(1000);
    expect(createBackoff(spread, {}, at(lowest))(1)).toBe(1200);
    expect(() => createBackoff({ strategy: 'schedule' }, {})).toThrow(/delaysMs/);
  });

  it('decorrelated: a sequence that stays within [0, max] and grows', () => {
    const sequence = resolveBackoff(
      { strategy: 'decorrelated', baseMs: 100, maxMs: 10_000 },
      {},
      at(0.5),
    ).sequence();
    const delays = Array.from({ length: 12 }, () => sequence.next());
    expect(delays.every((d) => d >= 0 && d <= 10_000)).toBe(true);
    expect(delays.at(-1)).toBe(10_000);
    expect(delays[0]).toBeLessThan(delays[3]!);
  });

  it("a module's defaults fill in only options of the same strategy", () => {
    const defaults = { strategy: 'schedule' as const, delaysMs: [5], jitter: 0.2 };
    expect(createBackoff(undefined, defaults, at(0.5))(1)).toBe(5);
    // Given a curve, the schedule (and its jitter) is gone: equal jitter by default.
    expect(createBackoff({ baseMs: 100 }, defaults, at(lowest))(1)).toBe(50);
    // A decorrelated module keeps its strategy when only its numbers are given.
    const inProcess = { strategy: 'decorrelated' as const, baseMs: 100, maxMs: 10_000 };
    const first = resolveBackoff({ baseMs: 1, maxMs: 2 }, inProcess, at(0.5)).sequence().next();
    expect(first).toBeLessThanOrEqual(2);
  });
});

describe('HTTP failure classification', () => {
  it('retryable: 408, 425, 429, 5xx but 501; unhealthy: the same but 429 and 425', () => {
    const statuses = [200, 400, 404, 408, 410, 422, 425, 429, 500, 501, 502, 503, 504];
    expect(statuses.filter(isRetryableStatus)).toEqual([408, 425, 429, 500, 502, 503, 504]);
    expect(statuses.filter(isUnhealthyStatus)).toEqual([408, 500, 502, 503, 504]);
  });
});

describe('circuit breaker on the injected clock', () => {
  it('opens, fails fast, lets one probe through after halfOpenAfterMs, closes or reopens', async () => {
    const clock = createManualClock();
    const breaker = new CircuitBreaker('https://a.example', {
      clock,
      breaker: new ConsecutiveBreaker(2),
      halfOpenAfterMs: 1000,
    });
    const states: string[] = [];
    breaker.onStateChange((s) => states.push(s));
    const failing = () => Promise.reject(new Error('down'));
    const status = (code: number) => () => Promise.resolve(code);
    const unhealthy = (o: { value: number } | { error: unknown }) =>
      'error' in o || isUnhealthyStatus(o.value);

    await expect(breaker.execute(failing)).rejects.toThrow('down');
    expect(await breaker.execute(status(503), unhealthy)).toBe(503);
    expect(breaker.state).toBe('open');
    let calls = 0;
    const counted = () => {
      calls++;
      return Promise.resolve(200);
    };
    await expect(breaker.execute(counted)).rejects.toSatisfy(
      (e) => isCircuitOpen(e) && e.retryable && e.retryAfterMs === 1000,
    );
    clock.advance(400);
    expect(breaker.retryInMs()).toBe(600);
    await expect(breaker.execute(counted)).rejects.toSatisfy(isCircuitOpen);
    expect(calls).toBe(0);

    // Half-open: the probe is the only call that goes through; it fails, so the circuit reopens.
    clock.advance(600);
    expect(breaker.state).toBe('half-open');
    let release!: () => void;
    const probe = breaker.execute(
      () => new Promise<number>((resolve) => (release = () => resolve(502))),
      unhealthy,
    );
    await expect(breaker.execute(counted)).rejects.toSatisfy(isCircuitOpen);
    release();
    expect(await probe).toBe(502);
    expect(breaker.state).toBe('open');

    // The next probe succeeds: closed. 429 never counts.
    clock.advance(1000);
    expect(await breaker.execute(counted)).toBe(200);
    expect(breaker.state).toBe('closed');
    for (let i = 0; i < 5; i++) await breaker.execute(status(429), unhealthy);
    expect(breaker.state).toBe('closed');
    expect(states).toEqual(['open', 'half-open', 'open', 'half-open', 'closed']);
  });
});

describe('cancellable sleep', () => {
  it('ends at once when aborted, on the system clock and on an injected one', async () => {
    const manual = createManualClock();
    for (const clock of [systemClock, manual]) {
      const controller = new AbortController();
      const started = performance.now();
      const sleeping = sleepUnlessAborted(clock, 60_000, controller.signal);
      setTimeout(() => controller.abort(), 10);
      await sleeping;
      // Half the 60 s sleep: an abort that was ignored would sit it out; a busy machine cannot.
      expect(performance.now() - started).toBeLessThan(30_000);
    }
    expect(manual.waiting).toBe(0);
  });
});
