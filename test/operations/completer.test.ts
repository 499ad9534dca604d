/**
 * The completer drives defined operations whose holder died to their end, without a client's
 * retry: resumed after the last recorded step with the same derived keys (one charge at a
 * provider that honours keys), tried again with backoff after transient failures, and, for one
 * that cannot complete, compensated or ended failed as its policy or an operator says.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import { createEvents, type IdemErrorEvent } from '../../src/core/event-channel.js';
import type { Sql } from '../../src/core/sql.js';
import { isStepFailed } from '../../src/core/errors.js';
import { deriveKey } from '../../src/core/keys.js';
import { createCompleter, decideIntent } from '../../src/operations/completer.js';
import { createIdem } from '../../src/operations/idem.js';
import { createEffectsSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { startFakeProvider, type FakeProvider } from '../support/fake-provider.js';
import { definePayment } from './fixtures/defined-payment.js';

const child = fileURLToPath(new URL('./fixtures/defined-payment-child.ts', import.meta.url));

function runChild(env: Record<string, string>): Promise<{ code: number | null; signal: string | null }> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ['--import', 'tsx', child], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    proc.on('error', reject);
    proc.on('close', (code, signal) => resolve({ code, signal }));
  });
}

let db: TestSchema;
let provider: FakeProvider;

beforeAll(
  async () => void ([db, provider] = await Promise.all([createEffectsSchema(), startFakeProvider()])),
);
afterAll(() => Promise.all([provider.close(), db.close()]));

const newKey = (prefix: string) => `${prefix}-${randomBytes(5).toString('hex')}`;
const effects = async (key: string) =>
  (
    await db.pool.query<{ payload: { kind: string } }>(
      `SELECT payload FROM "${db.schema}".effects WHERE intent = $1 ORDER BY id`,
      [key],
    )
  ).rows.map((r) => r.payload.kind);
const chargesFor = (key: string) =>
  provider.calls.filter((c) => c.key === deriveKey({ tenant: 'acme', operation: 'pay', key }, 'charge'));
const row = async (key: string) =>
  (
    await db.pool.query<{ state: string; error: string | null }>(
      `SELECT state, error FROM "${db.schema}".requests WHERE idempotency_key = $1`,
      [key],
    )
  ).rows[0];
const intentCount = async (key: string) =>
  Number(
    (
      await db.pool.query<{ count: string }>(
        `SELECT count(*) FROM "${db.schema}".intents WHERE idempotency_key = $1`,
        [key],
      )
    ).rows[0]!.count,
  );

describe('a defined payment whose process is killed, with no client retry', () => {
  for (const crashAt of ['after-charge-call', 'between-steps'] as const) {
    it(`(${crashAt}) is completed by the completer once its lease lapsed, with one charge`, async () => {
      const key = newKey(crashAt);
      const leaseMs = 1000;
      const pollIntervalMs = 200;
      const crashed = await runChild({
        DATABASE_URL: databaseUrl(),
        SCHEMA: db.schema,
        PROVIDER_URL: provider.url,
        KEY: key,
        CRASH_AT: crashAt,
        LEASE_MS: String(leaseMs),
      });
      const diedAt = Date.now();
      expect(crashed.signal).toBe('SIGKILL');
      expect(await row(key)).toMatchObject({ state: 'pending' });
      expect(await intentCount(key)).toBe(1);

      // Another process: the same definition, a completer, and nobody retrying the key.
      // The completer reports on its Idem's channel.
      const events = createEvents();
      const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, leaseMs, events });
      definePayment(idem, { schema: db.schema, providerUrl: provider.url });
      const completions: { kind: string; attempts: number; at: number }[] = [];
      events.on('completion', (c) => {
        if (c.scope.key === key) completions.push({ kind: c.kind, attempts: c.attempts, at: Date.now() });
      });
      const completer = createCompleter({ idem, pollIntervalMs });
      await completer.start();
      try {
        for (let i = 0; i < 200 && completions.length === 0; i++)
          await new Promise((r) => setTimeout(r, 100));
      } finally {
        await completer.stop();
      }
      // Taken once, on its first attempt, and only after the lease it had lapsed.
      expect(completions).toHaveLength(1);
      expect(completions[0]).toMatchObject({ kind: 'completed', attempts: 1 });
      console.log(
        `completer: ${crashAt}, completed ${completions[0]!.at - diedAt} ms after the holder died (lease ${leaseMs} ms + poll ${pollIntervalMs} ms)`,
      );
      expect(await row(key)).toMatchObject({ state: 'completed' });
      expect(await intentCount(key)).toBe(0);
      expect(await effects(key)).toEqual(['payment', 'charge']);
      // Killed after the call: called again with the same key, which the provider dedupes.
      expect(chargesFor(key)).toHaveLength(crashAt === 'after-charge-call' ? 2 : 1);
      expect(new Set(chargesFor(key).map((c) => c.key)).size).toBe(1);

      // The client that comes back later gets the completer's result, with the input's types kept.
      const payment = definePayment(createIdem({ sql: fromPg(db.pool), schema: db.schema }), {
        schema: db.schema,
        providerUrl: provider.url,
      });
      const replay = await payment.run({
        tenant: 'acme',
        key,
        input: { amount: 700, at: new Date('2030-01-02T03:04:05Z') },
      });
      expect(replay.replayed).toBe(true);
      expect(replay.value).toMatchObject({ resumed: true, inputIsDate: true });
    });
  }
});

describe('the completer, on a manual clock', () => {
  const setup = (options: { failCharges?: number; giveUp?: boolean } = {}) => {
    const clock = new ManualClock(Date.now());
    const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: 1000 });
    let failures = options.failCharges ?? 0;
    const payment = definePayment(idem, {
      schema: db.schema,
      providerUrl: provider.url,
      failCharge: () => failures-- > 0,
    });
    return { clock, idem, payment };
  };
  const input = { amount: 500, at: new Date('2031-05-06T07:08:09Z') };

  it('tries a transient failure again with backoff, shows it meanwhile, and completes it once', async () => {
    const { clock, idem, payment } = setup({ failCharges: 3 });
    const key = newKey('transient');
    // The first execution fails at the charge (the provider is down) and nobody retries it.
    await expect(payment.run({ tenant: 'acme', key, input })).rejects.toMatchObject({ retryable: true });
    const completer = createCompleter({ idem, backoff: { baseMs: 1000, maxMs: 1000, jitter: 'none' } });
    // A client's retry could resume it at once; the completer waits a lease for one first.
    expect((await completer.runOnce()).filter((c) => c.scope.key === key)).toEqual([]);
    clock.advance(1000);
    const first = await completer.runOnce();
    expect(first.filter((c) => c.scope.key === key)).toMatchObject([
      {
        kind: 'retrying',
        attempts: 1,
        retryInMs: 1000,
        error: expect.stringContaining('provider unavailable') as string,
      },
    ]);
    const [pending] = (await completer.list()).filter((p) => p.scope.key === key);
    expect(pending).toMatchObject({ attempts: 1, recoveryPoint: 'call:charge' });
    expect(pending!.lastError).toContain('provider unavailable');
    // Not due again before its backoff.
    expect((await completer.runOnce()).filter((c) => c.scope.key === key)).toEqual([]);
    clock.advance(1000);
    expect((await completer.runOnce()).filter((c) => c.scope.key === key)).toMatchObject([
      { kind: 'retrying', attempts: 2 },
    ]);
    clock.advance(1000);
    expect((await completer.runOnce()).filter((c) => c.scope.key === key)).toMatchObject([
      { kind: 'completed', attempts: 3 },
    ]);
    expect(await effects(key)).toEqual(['payment', 'charge']);
    expect(chargesFor(key)).toHaveLength(1);
    expect(await intentCount(key)).toBe(0);
  });

  it('reports every attempt as a completion event, on its own channel when given one', async () => {
    const { clock, idem, payment } = setup({ failCharges: 2 });
    const key = newKey('reported');
    await expect(payment.run({ tenant: 'acme', key, input })).rejects.toMatchObject({ retryable: true });
    const events = createEvents();
    const seen: string[] = [];
    events.on('completion', (c) => {
      if (c.scope.key === key) seen.push(`${c.kind} ${c.attempts}`);
      throw new Error('a broken metrics backend'); // changes nothing
    });
    const completer = createCompleter({
      idem,
      events,
      backoff: { baseMs: 1000, maxMs: 1000, jitter: 'none' },
    });
    clock.advance(1000);
    const first = (await completer.runOnce()).filter((c) => c.scope.key === key);
    clock.advance(1000);
    const second = (await completer.runOnce()).filter((c) => c.scope.key === key);
    expect([...first, ...second].map((c) => c.kind)).toEqual(['retrying', 'completed']);
    expect(seen).toEqual(['retrying 1', 'completed 2']);
  });

  it('reports a failed round as an error event (source completer, where round) and goes on', async () => {
    const down: Sql = {
      query: () => Promise.reject(new Error('connection refused')),
      transaction: () => Promise.reject(new Error('connection refused')),
    };
    const events = createEvents();
    const idem = createIdem({ sql: down, schema: db.schema, events });
    idem.define('pay', async () => 'never');
    const errors: IdemErrorEvent[] = [];
    events.on('error', (e) => errors.push(e));
    const completer = createCompleter({ idem, pollIntervalMs: 10 });
    await completer.start();
    try {
      for (let i = 0; i < 100 && errors.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
    } finally {
      await completer.stop();
    }
    expect(errors.length).toBeGreaterThanOrEqual(2);
    expect(errors[0]).toMatchObject({ source: 'completer', where: 'round' });
    expect((errors[0]!.error as Error).message).toBe('connection refused');
  });

  it('ends one that cannot complete as its give-up policy says: failed visibly, every retry gets the failure', async () => {
    const clock = new ManualClock(Date.now());
    const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: 1000 });
    const doomed = idem.define(
      'doomed',
      async (op) => {
        await op.step('first', async () => 'done');
        await op.call('never', async () => {
          throw Object.assign(new Error('provider keeps refusing'), { retryable: true });
        });
        return 'unreachable';
      },
      { giveUp: { afterAttempts: 2, action: 'fail' } },
    );
    const key = newKey('doomed');
    await expect(doomed.run({ tenant: 'acme', key, input: {} })).rejects.toMatchObject({ retryable: true });
    clock.advance(1000);
    const completer = createCompleter({ idem, backoff: { baseMs: 10, maxMs: 10, jitter: 'none' } });
    const kinds: string[] = [];
    for (let i = 0; i < 3; i++) {
      kinds.push(...(await completer.runOnce()).filter((c) => c.scope.key === key).map((c) => c.kind));
      clock.advance(10);
    }
    expect(kinds).toEqual(['retrying', 'retrying', 'failed']);
    expect(await row(key)).toMatchObject({ state: 'failed' });
    expect((await row(key))!.error).toContain('provider keeps refusing');
    const retry = await doomed.run({ tenant: 'acme', key, input: {} }).catch((e: unknown) => e);
    expect(isStepFailed(retry)).toBe(true);
  });

  it('runs the compensation an operator asked for, and stores its refusal for every retry', async () => {
    const { clock, idem, payment } = setup({ failCharges: 100 });
    const key = newKey('compensate');
    await expect(payment.run({ tenant: 'acme', key, input })).rejects.toMatchObject({ retryable: true });
    clock.advance(1000);
    const completer = createCompleter({ idem, backoff: { baseMs: 60_000, jitter: 'none' } });
    expect((await completer.runOnce()).filter((c) => c.scope.key === key)).toMatchObject([
      { kind: 'retrying' },
    ]);
    // The operator decides (the CLI or the console call the same function); it is due at once.
    expect(await decideIntent(idem, { tenant: 'acme', operation: 'pay', key }, 'compensate')).toBe(true);
    expect((await completer.runOnce()).filter((c) => c.scope.key === key)).toMatchObject([
      { kind: 'compensated', attempts: 2 },
    ]);
    expect(await effects(key)).toEqual(['payment', 'refund']);
    const replay = await payment.run({ tenant: 'acme', key, input });
    expect(replay).toMatchObject({
      replayed: true,
      state: 'failed',
      value: { refunded: 500, resumed: true, inputIsDate: true },
    });
    expect(await decideIntent(idem, { tenant: 'acme', operation: 'pay', key }, 'fail')).toBe(false);
  });

  it('two completers at once never run one intent twice', async () => {
    const { clock, idem, payment } = setup({ failCharges: 12 });
    const keys = Array.from({ length: 12 }, () => newKey('pair'));
    for (const key of keys) {
      await expect(payment.run({ tenant: 'acme', key, input })).rejects.toMatchObject({ retryable: true });
    }
    clock.advance(1000);
    const [a, b] = [createCompleter({ idem, batchSize: 3 }), createCompleter({ idem, batchSize: 3 })];
    const done = (await Promise.all([a.drain(), b.drain()])).flat().filter((c) => keys.includes(c.scope.key));
    expect(
      done
        .filter((c) => c.kind === 'completed')
        .map((c) => c.scope.key)
        .sort(),
    ).toEqual([...keys].sort());
    for (const key of keys) {
      expect(await effects(key)).toEqual(['payment', 'charge']);
      expect(chargesFor(key)).toHaveLength(1);
    }
  });

  it('leaves an intent alone while its holder is alive, and an operation this process has no code for', async () => {
    const clock = new ManualClock(Date.now());
    const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: 1000 });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const slow = idem.define('slow', async (op) => {
      await op.step('one', async () => 1);
      await gate;
      return op.fence;
    });
    const key = newKey('alive');
    const running = slow.run({ tenant: 'acme', key, input: {} });
    for (let i = 0; i < 50 && (await row(key))?.state !== 'pending'; i++)
      await new Promise((r) => setTimeout(r, 20));
    // Another process, without the definition of 'slow': nothing to do.
    const other = createIdem({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: 1000 });
    other.define('unrelated', async () => 0);
    expect((await createCompleter({ idem: other }).runOnce()).filter((c) => c.scope.key === key)).toEqual([]);
    // Within the lease, the holder is left alone.
    expect((await createCompleter({ idem }).runOnce()).filter((c) => c.scope.key === key)).toEqual([]);
    release();
    expect((await running).value).toBe(1);
    expect(await intentCount(key)).toBe(0);
  });
});
