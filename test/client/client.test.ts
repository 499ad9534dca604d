import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  assertOk,
  classifyError,
  type ClientOptions,
  createResilientClient,
  createRetryBudget,
  isCircuitOpen,
  isHttpStatusError,
  parseRetryAfter,
  retry,
  type RetryEvent,
  subKey,
  withIdempotencyKey,
} from 'idem/client';
import { ConsecutiveBreaker } from 'cockatiel';
import { type Clock, createEvents } from 'idem';
import { databaseUrl } from '../support/database.js';
import { freePort } from '../support/ports.js';
import { startProvider, type Provider } from '../support/client/provider.js';

/** A clock whose sleeps return at once but are recorded, and move its time. */
function recordingClock(
  start = Date.UTC(2031, 5, 1, 12, 0, 0),
): Clock & { sleeps: number[]; advance(ms: number): void } {
  let now = start;
  const sleeps: number[] = [];
  return {
    sleeps,
    advance: (ms) => {
      now += ms;
    },
    now: () => now,
    sleep: async (ms) => {
      sleeps.push(ms);
      now += ms;
    },
  };
}

describe('resilient client', () => {
  let provider: Provider;

  beforeAll(async () => {
    provider = await startProvider();
  });
  afterEach(() => {
    provider.reset();
    vi.useRealTimers();
  });
  afterAll(() => provider.stop());

  function client(options: ClientOptions = {}) {
    const clock = recordingClock();
    const retries: RetryEvent[] = [];
    const events = createEvents();
    events.on('client:retry', (e) => retries.push(e));
    const c = createResilientClient({
      baseUrl: provider.url,
      clock,
      events,
      breaker: false,
      ...options,
    });
    return { c, clock, retries };
  }

  it('attaches the current step key to unsafe calls, derives named sub-keys, and leaves safe calls alone', async () => {
    const { c } = client();
    await withIdempotencyKey('idem_step-key', async () => {
      await c.fetch('/effects/charge', { method: 'POST', body: '{}' });
      await c.fetch('/effects/receipt', { method: 'POST', body: '{}', keyName: 'receipt' });
      await c.fetch('/status');
    });
    await c.fetch('/effects/charge', { method: 'POST', body: '{}', idempotencyKey: 'explicit-1' });
    await withIdempotencyKey('idem_step-key', () =>
      c.fetch('/effects/none', { method: 'POST', body: '{}', idempotencyKey: null }),
    );
    expect(provider.requests.map((r) => [r.method, r.rawKey])).toEqual([
      ['POST', '"idem_step-key"'], // the IETF draft's structured-field string
      ['POST', `"${subKey('idem_step-key', 'receipt')}"`],
      ['GET', null],
      ['POST', '"explicit-1"'],
      ['POST', null],
    ]);
    expect(subKey('idem_step-key', 'receipt')).toBe(subKey('idem_step-key', 'receipt'));
    expect(subKey('idem_step-key', 'receipt')).not.toBe(subKey('idem_step-key', 'refund'));
    const bare = client({ keyFormat: 'bare', keyHeader: 'Idempotency-Key' }).c;
    await bare.fetch('/effects/charge', { method: 'POST', body: '{}', idempotencyKey: 'k-bare' });
    expect(provider.requests.at(-1)!.rawKey).toBe('k-bare');
  });

  it('retries a keyed POST on 503 with decorrelated jitter and the same key: one effect', async () => {
    const { c, clock, retries } = client();
    provider.respond({ status: 503 }, { status: 502 }, { status: 500, afterEffect: true });
    const res = await c.fetch('/effects/charge', {
      method: 'POST',
      body: '{"amount":5}',
      idempotencyKey: 'order-9',
    });
    expect(res.status).toBe(201);
    expect(res.headers.get('idempotent-replayed')).toBe('true');
    expect(provider.requestsWith('order-9')).toBe(4);
    expect(provider.effectsFor('order-9')).toBe(1);
    expect(retries.map((r) => r.reason)).toEqual(['http 503', 'http 502', 'http 500']);
    expect(clock.sleeps).toHaveLength(3);
    for (const ms of clock.sleeps) {
      expect(ms).toBeGreaterThan(0);
      expect(ms).toBeLessThanOrEqual(10_000);
    }
  });

  it('retries 408, 425, 429 and 5xx; never 4xx or 501', async () => {
    for (const status of [408, 425, 429, 500, 502, 503, 504]) {
      const { c } = client({ maxAttempts: 2 });
      provider.reset();
      provider.respond({ status });
      const res = await c.fetch('/effects/x', { method: 'POST', body: '{}', idempotencyKey: `s${status}` });
      expect([status, res.status, provider.requests.length]).toEqual([status, 201, 2]);
    }
    for (const status of [400, 401, 403, 404, 409, 422, 501]) {
      const { c } = client({ maxAttempts: 3 });
      provider.reset();
      provider.respond({ status });
      const res = await c.fetch('/effects/x', { method: 'POST', body: '{}', idempotencyKey: `s${status}` });
      expect([status, res.status, provider.requests.length]).toEqual([status, status, 1]);
    }
  });

  it('honours Retry-After in seconds and as an HTTP-date, up to the cap', async () => {
    const { c, clock, retries } = client();
    provider.respond({ status: 503, headers: { 'retry-after': '2' } });
    expect((await c.fetch('/effects/a', { method: 'POST', body: '{}', idempotencyKey: 'ra-1' })).status).toBe(
      201,
    );
    expect(clock.sleeps).toEqual([2000]);
    expect(retries[0]).toMatchObject({ delayMs: 2000, fromRetryAfter: true, reason: 'http 503' });

    const at = new Date(clock.now() + 7000).toUTCString(); // IMF-fixdate, e.g. "Sun, 01 Jun 2031 12:00:09 GMT"
    provider.respond({ status: 429, headers: { 'retry-after': at } });
    expect((await c.fetch('/effects/b', { method: 'POST', body: '{}', idempotencyKey: 'ra-2' })).status).toBe(
      201,
    );
    expect(clock.sleeps.at(-1)).toBe(7000);

    // Longer than maxRetryAfterMs: the wait is capped to it, then the retry goes out.
    const capped = client({ maxRetryAfterMs: 5000 });
    provider.respond({ status: 503, headers: { 'retry-after': '120' } });
    const res = await capped.c.fetch('/effects/c', { method: 'POST', body: '{}', idempotencyKey: 'ra-3' });
    expect(res.status).toBe(201);
    expect(capped.clock.sleeps).toEqual([5000]);
    expect(provider.requestsWith('ra-3')).toBe(2);
    // A failing answer carries its Retry-After to the caller (a saga step, a claim's backoff).
    const refused = new Response('busy', { status: 503, headers: { 'retry-after': '120' } });
    await expect(assertOk(refused)).rejects.toSatisfy(
      (e) => isHttpStatusError(e) && e.retryable && e.retryAfterMs === 120_000,
    );

    const now = Date.UTC(2031, 0, 1);
    expect(parseRetryAfter('0', now)).toBe(0);
    expect(parseRetryAfter('Wed, 01 Jan 2031 00:00:30 GMT', now)).toBe(30_000);
    expect(parseRetryAfter('Wednesday, 01-Jan-31 00:00:30 GMT', now)).toBe(30_000); // RFC 850
    expect(parseRetryAfter('Tue, 31 Dec 2030 23:00:00 GMT', now)).toBe(0); // in the past
    expect(parseRetryAfter('-1', now)).toBeUndefined();
    expect(parseRetryAfter('1.5', now)).toBeUndefined();
    expect(parseRetryAfter('soon', now)).toBeUndefined();
  });

  it('never retries a POST or PATCH without a key; retries PUT, DELETE and GET', async () => {
    const { c } = client();
    provider.respond({ status: 503 });
    expect((await c.fetch('/effects/n', { method: 'POST', body: '{}' })).status).toBe(503);
    provider.respond({ status: 500, afterEffect: true });
    expect((await c.fetch('/effects/n', { method: 'PATCH', body: '{}' })).status).toBe(500);
    expect(provider.requests).toHaveLength(2);
    expect(provider.effectsOf('n')).toBe(1);
    // A network error on a keyless POST is not retried either.
    provider.reset();
    provider.respond({ status: 0, destroy: true });
    await expect(c.fetch('/effects/n', { method: 'POST', body: '{}' })).rejects.toThrow();
    expect(provider.requests).toHaveLength(1);
    for (const method of ['PUT', 'DELETE', 'GET']) {
      provider.reset();
      provider.respond({ status: 503 });
      const res = await c.fetch('/resource/1', { method, ...(method === 'GET' ? {} : { body: '{}' }) });
      expect([method, res.status, provider.requests.length]).toEqual([method, 200, 2]);
    }
  });

  it('retries network errors and timeouts: a reset socket, a refused connection, a slow answer', async () => {
    const { c, retries } = client({ timeoutMs: 200 });
    provider.respond({ status: 0, destroy: true }, { status: 200, delayMs: 600 });
    const res = await c.fetch('/effects/net', { method: 'POST', body: '{}', idempotencyKey: 'net-1' });
    expect(res.status).toBe(201);
    expect(retries.map((r) => r.reason)).toEqual([
      expect.stringMatching(/UND_ERR_SOCKET|ECONNRESET/),
      'timeout',
    ]);
    expect(provider.effectsFor('net-1')).toBe(1);

    const closedPort = await freePort();
    const refused = client({ baseUrl: `http://127.0.0.1:${closedPort}`, maxAttempts: 3 });
    await expect(refused.c.fetch('/x', { method: 'GET' })).rejects.toSatisfy(
      (e) => classifyError(e).reason === 'ECONNREFUSED',
    );
    expect(refused.retries).toHaveLength(2);
    // A thrown attempt's event carries what it threw; an answered one (a 503) carries none.
    expect(refused.retries[0]).toMatchObject({
      method: 'GET',
      attempt: 1,
      error: expect.any(Error) as unknown,
    });
    expect(retries[0]!.error).toBeDefined();
  });

  it('retry() reports each retry as client:retry, with the attempt, the wait and the error', async () => {
    const events = createEvents();
    const seen: RetryEvent[] = [];
    events.on('client:retry', (e) => seen.push(e));
    const clock = recordingClock();
    const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    const busy = Object.assign(new Error('busy'), { retryable: true, retryAfterMs: 250 });
    let calls = 0;
    const value = await retry(
      async () => {
        calls++;
        if (calls === 1) throw reset;
        if (calls === 2) throw busy;
        return 'done';
      },
      { clock, events, maxAttempts: 3 },
    );
    expect(value).toBe('done');
    expect(seen).toEqual([
      expect.objectContaining({ attempt: 1, reason: 'ECONNRESET', fromRetryAfter: false, error: reset }),
      expect.objectContaining({ attempt: 2, delayMs: 250, fromRetryAfter: true, error: busy }),
    ]);
    expect(seen[0]!.url).toBeUndefined();
  });

  it('stops retrying when the retry budget is spent', async () => {
    const clock = recordingClock();
    const budget = createRetryBudget({ ratio: 0, minPerSecond: 0.3, windowMs: 10_000, clock }); // 3 per 10 s
    const { c, retries } = client({ retryBudget: budget, clock, maxAttempts: 10 });
    provider.respond(...Array.from({ length: 10 }, () => ({ status: 503 })));
    const res = await c.fetch('/effects/b', { method: 'POST', body: '{}', idempotencyKey: 'budget' });
    expect(res.status).toBe(503);
    expect(retries).toHaveLength(3);
    expect(provider.requests).toHaveLength(4);
    // With ratio 0.5 the budget grows with first attempts.
    const grown = createRetryBudget({
      ratio: 0.5,
      minPerSecond: 0,
      windowMs: 10_000,
      clock: recordingClock(),
    });
    for (let i = 0; i < 10; i++) grown.recordRequest();
    const allowed = Array.from({ length: 10 }, () => grown.tryRetry()).filter(Boolean).length;
    expect(allowed).toBe(5);
  });

  it('circuit breaker: opens after consecutive failures, fails fast, lets one probe through, recovers', async () => {
    const { c, clock } = client({
      breaker: { breaker: new ConsecutiveBreaker(3), halfOpenAfterMs: 5000 },
      maxAttempts: 1,
    });
    const breaker = c.breaker(new URL(provider.url).origin)!;
    const states: string[] = [];
    breaker.onStateChange((s) => states.push(s));
    provider.respond({ status: 503 }, { status: 500 }, { status: 504 });
    for (let i = 0; i < 3; i++)
      expect((await c.fetch('/effects/cb', { method: 'GET' })).status).toBeGreaterThan(499);
    expect(breaker.state).toBe('open');
    // Open: fails fast, the downstream sees nothing.
    await expect(c.fetch('/effects/cb', { method: 'GET' })).rejects.toSatisfy(
      (e) => isCircuitOpen(e) && e.retryable && e.retryAfterMs === 5000,
    );
    expect(provider.requests).toHaveLength(3);

    // Half-open after `ms` (on the client's clock): one probe goes through, answered `status`;
    // a call during the probe fails fast.
    const halfOpenProbe = async (ms: number, status: number) => {
      clock.advance(ms);
      provider.respond({ status, delayMs: 150 });
      const probe = c.fetch('/effects/cb', { method: 'GET' });
      await expect(c.fetch('/effects/cb', { method: 'GET' })).rejects.toSatisfy(isCircuitOpen);
      expect((await probe).status).toBe(status);
    };
    // The probe fails: open again.
    await halfOpenProbe(5000, 503);
    expect(breaker.state).toBe('open');
    expect(provider.requests).toHaveLength(4);

    // The next probe succeeds: closed, traffic flows.
    await halfOpenProbe(5001, 200);
    expect(breaker.state).toBe('closed');
    expect((await c.fetch('/effects/cb', { method: 'GET' })).status).toBe(200);
    expect(provider.requests).toHaveLength(6);
    expect(states).toEqual(['open', 'half-open', 'open', 'half-open', 'closed']);

    // 4xx answers and 429 are not the downstream being broken: they never open the breaker.
    provider.respond(...Array.from({ length: 5 }, () => ({ status: 429 })), { status: 404 }, { status: 422 });
    for (let i = 0; i < 7; i++) await c.fetch('/effects/cb', { method: 'GET' });
    expect(breaker.state).toBe('closed');
  });

  it('a breaker that opens in the middle of retries ends them at once', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const { c } = client({
      breaker: { breaker: new ConsecutiveBreaker(2), halfOpenAfterMs: 60_000 },
      maxAttempts: 5,
    });
    provider.respond({ status: 503 }, { status: 503 }, { status: 503 });
    await expect(
      c.fetch('/effects/mid', { method: 'POST', body: '{}', idempotencyKey: 'mid' }),
    ).rejects.toSatisfy(isCircuitOpen);
    expect(provider.requests).toHaveLength(2);
  });

  describe('classifies real PostgreSQL failures', () => {
    let pool: pg.Pool;
    beforeAll(async () => {
      pool = new pg.Pool({ connectionString: databaseUrl(), max: 4 });
      await pool.query('CREATE TEMP TABLE IF NOT EXISTS t (id int)'); // warms a connection
    });
    afterAll(() => pool.end());

    async function capture(fn: () => Promise<unknown>): Promise<unknown> {
      try {
        await fn();
      } catch (error) {
        return error;
      }
      throw new Error('expected a failure');
    }

    it('55P03 lock_not_available, 40P01 deadlock, 40001 serialization failure, class 08, 23505', async () => {
      const table = `client_classify_${process.pid}`;
      await pool.query(`DROP TABLE IF EXISTS ${table}; CREATE TABLE ${table} (id int PRIMARY KEY, v int)`);
      await pool.query(`INSERT INTO ${table} VALUES (1, 0), (2, 0)`);
      const a = await pool.connect();
      const b = await pool.connect();
      try {
        await a.query('BEGIN');
        await a.query(`SELECT * FROM ${table} WHERE id = 1 FOR UPDATE`);
        const nowait = await capture(() => b.query(`SELECT * FROM ${table} WHERE id = 1 FOR UPDATE NOWAIT`));
        expect((nowait as { code: string }).code).toBe('55P03');
        await a.query('ROLLBACK');

        await a.query('BEGIN');
        await b.query('BEGIN');
        await a.query(`UPDATE ${table} SET v = 1 WHERE id = 1`);
        await b.query(`UPDATE ${table} SET v = 1 WHERE id = 2`);
        const results = await Promise.allSettled([
          a.query(`UPDATE ${table} SET v = 2 WHERE id = 2`),
          b.query(`UPDATE ${table} SET v = 2 WHERE id = 1`),
        ]);
        const deadlock = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
        expect((deadlock.reason as { code: string }).code).toBe('40P01');
        await a.query('ROLLBACK');
        await b.query('ROLLBACK');

        await a.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
        await b.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
        await a.query(`SELECT sum(v) FROM ${table}`);
        await b.query(`SELECT sum(v) FROM ${table}`);
        await a.query(`UPDATE ${table} SET v = v + 1 WHERE id = 1`);
        await b.query(`UPDATE ${table} SET v = v + 1 WHERE id = 2`);
        await a.query('COMMIT');
        const serialization = await capture(() => b.query('COMMIT'));
        expect((serialization as { code: string }).code).toBe('40001');

        const duplicate = await capture(() => pool.query(`INSERT INTO ${table} VALUES (1, 0)`));
        for (const [error, retryable] of [
          [nowait, true],
          [deadlock.reason, true],
          [serialization, true],
          [duplicate, false],
          [Object.assign(new Error('connection failure'), { code: '08006' }), true],
          [Object.assign(new Error('protocol violation'), { code: '08P01' }), true],
        ] as const) {
          expect([(error as { code: string }).code, classifyError(error).retryable]).toEqual([
            (error as { code: string }).code,
            retryable,
          ]);
        }
      } finally {
        a.release();
        b.release();
        await pool.query(`DROP TABLE IF EXISTS ${table}`);
      }
    });
  });
});
