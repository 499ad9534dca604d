import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import { isFenced, isInProgress } from '../../src/core/errors.js';
import { deriveKey } from '../../src/core/keys.js';
import { createIdem } from '../../src/operations/idem.js';
import { defaultHeartbeatMs } from '../../src/steps/engine.js';
import { createResilientClient, currentIdempotencyKey } from '../../src/client/index.js';
import { createEffectsSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { partitionable } from '../support/partition.js';
import { chargeAt, startFakeProvider, type FakeProvider } from '../support/fake-provider.js';

const child = fileURLToPath(new URL('./fixtures/multi-step-child.ts', import.meta.url));

function runChild(
  env: Record<string, string>,
): Promise<{ code: number | null; signal: string | null; stdout: string }> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ['--import', 'tsx', child], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let stdout = '';
    proc.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    proc.on('error', reject);
    proc.on('close', (code, signal) => resolve({ code, signal, stdout }));
  });
}

describe('multi-step operations', () => {
  let db: TestSchema;
  let provider: FakeProvider;

  beforeAll(
    async () => void ([db, provider] = await Promise.all([createEffectsSchema(), startFakeProvider()])),
  );
  afterAll(async () => {
    await provider.close();
    await db.close();
  });

  const effects = async (key: string) =>
    (
      await db.pool.query<{ payload: { kind: string } }>(
        `SELECT payload FROM "${db.schema}".effects WHERE intent = $1 ORDER BY id`,
        [key],
      )
    ).rows.map((r) => r.payload.kind);

  it("a step's outgoing calls carry its derived key without being told (idem/client)", async () => {
    const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema });
    const client = createResilientClient({ baseUrl: provider.url });
    const key = `ms-client-${randomBytes(4).toString('hex')}`;
    const spec = { tenant: 'acme', operation: 'pay', key, request: { amount: 7 } };
    const seenBefore = provider.calls.length;
    const result = await idem.steps(spec, async (op) => {
      const charge = await op.step('charge', async () => {
        expect(currentIdempotencyKey()).toBe(op.deriveKey('charge'));
        const res = await client.fetch('/charges', { method: 'POST', body: JSON.stringify({ amount: 7 }) });
        return (await res.json()) as { id: string };
      });
      return charge.id;
    });
    const calls = provider.calls.slice(seenBefore);
    // The client sends the key as a structured-field string, as the IETF draft writes it.
    expect(calls.map((c) => c.key)).toEqual([
      `"${deriveKey({ tenant: 'acme', operation: 'pay', key }, 'charge')}"`,
    ]);
    expect(provider.charges.get(calls[0]!.key!)!.id).toBe(result.value);
    expect(currentIdempotencyKey()).toBeUndefined(); // only inside the step
  });

  for (const crashAt of ['after-charge-call', 'between-steps'] as const) {
    it(`resumes after the holder is killed (${crashAt}); the provider sees one derived key and charges once`, async () => {
      const key = `ms-${crashAt}-${randomBytes(4).toString('hex')}`;
      const env = { DATABASE_URL: databaseUrl(), SCHEMA: db.schema, PROVIDER_URL: provider.url, KEY: key };
      const crashed = await runChild({ ...env, CRASH_AT: crashAt });
      expect(crashed.signal).toBe('SIGKILL');
      const row = await db.pool.query(
        `SELECT state, fence FROM "${db.schema}".requests WHERE idempotency_key = $1`,
        [key],
      );
      expect(row.rows[0]).toMatchObject({ state: 'pending', fence: 1 });

      const retry = await runChild({ ...env, CRASH_AT: '' });
      expect(retry.code).toBe(0);
      const value = JSON.parse(retry.stdout) as { key: string; chargeId: string; resumed: boolean };
      expect(value.resumed).toBe(true);
      const expectedKey = deriveKey({ tenant: 'acme', operation: 'pay', key }, 'charge');
      expect(value.key).toBe(expectedKey);

      const callsForIntent = provider.calls.filter((c) => c.key === expectedKey);
      // Killed after the call: the retry calls again with the same key. Killed after the
      // step committed: the recorded result is reused and the provider is not called again.
      expect(callsForIntent).toHaveLength(crashAt === 'after-charge-call' ? 2 : 1);
      expect(provider.charges.get(expectedKey)?.id).toBe(value.chargeId);
      expect(await effects(key)).toEqual(['payment', 'charge']);

      // A third attempt replays without running anything.
      const replay = await runChild({ ...env, CRASH_AT: '' });
      expect(JSON.parse(replay.stdout)).toEqual(value);
      expect(provider.calls.filter((c) => c.key === expectedKey)).toHaveLength(callsForIntent.length);
    });
  }

  it('refuses every write of a zombie holder after a takeover', async () => {
    const clock = new ManualClock(Date.now());
    const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: 1000, waitMs: 0 });
    const spec = { tenant: 'acme', operation: 'zombie', key: `z-${randomBytes(4).toString('hex')}` };
    let zombieContinue!: () => void;
    const zombieGate = new Promise<void>((r) => (zombieContinue = r));
    let zombieReachedGate!: () => void;
    const atGate = new Promise<void>((r) => (zombieReachedGate = r));

    const zombie = idem.steps(spec, async (op) => {
      await op.step('one', async () => 'zombie-one');
      zombieReachedGate();
      await zombieGate; // stalls past its lease, like a long GC pause
      await op.step('two', async () => 'zombie-two');
      return 'zombie';
    });
    const zombieOutcome = zombie.catch((e: unknown) => e);
    await atGate;

    // While the lease is live, a duplicate is told to come back later.
    expect(isInProgress(await idem.steps(spec, async () => 'x').catch((e: unknown) => e))).toBe(true);

    clock.advance(1001);
    const successor = await idem.steps(spec, async (op) => {
      expect(op.resumed).toBe(true);
      expect(op.fence).toBe(2);
      const one = await op.step('one', async () => 'successor-one');
      expect(one).toBe('zombie-one'); // recorded steps are not run again
      await op.step('two', async () => 'successor-two');
      return 'successor';
    });
    expect(successor.value).toBe('successor');

    zombieContinue();
    expect(isFenced(await zombieOutcome)).toBe(true);
    const steps = await db.pool.query<{ step: string; result: string; fence: number }>(
      `SELECT step, result, fence FROM "${db.schema}".steps WHERE idempotency_key = $1 ORDER BY step`,
      [spec.key],
    );
    expect(steps.rows).toEqual([
      { step: 'one', result: '"zombie-one"', fence: 1 },
      { step: 'two', result: '"successor-two"', fence: 2 },
    ]);
    const final = await idem.steps(spec, async () => 'again');
    expect(final).toMatchObject({ replayed: true, value: 'successor' });
  });

  describe('calls to the outside world', () => {
    const lease = 1000;
    /** Polls `condition` every 5 ms (real time), for at most 5 s. */
    const soon = async (condition: () => boolean | Promise<boolean>, what: string) => {
      for (let i = 0; i < 1000; i++) {
        if (await condition()) return;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      throw new Error(`timed out waiting for ${what}`);
    };
    const row = async (key: string) =>
      (
        await db.pool.query<{
          fence: number;
          locked_until: Date;
          recovery_point: string | null;
          state: string;
        }>(
          `SELECT fence, locked_until, recovery_point, state FROM "${db.schema}".requests WHERE idempotency_key = $1`,
          [key],
        )
      ).rows[0]!;
    const callRow = async (key: string, step: string) =>
      (
        await db.pool.query<{ kind: string; result: string | null; fence: number; started_at: Date | null }>(
          `SELECT kind, result, fence, started_at FROM "${db.schema}".steps WHERE idempotency_key = $1 AND step = $2`,
          [key, step],
        )
      ).rows[0];
    const gate = () => {
      let open!: () => void;
      const opened = new Promise<void>((resolve) => (open = resolve));
      let reached!: () => void;
      const arrived = new Promise<void>((resolve) => (reached = resolve));
      return { open, opened, reached, arrived };
    };

    it("records the call's start before it runs, and its result after, with no transaction open between", async () => {
      const clock = new ManualClock(Date.now());
      const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: lease });
      const key = `start-${randomBytes(4).toString('hex')}`;
      const g = gate();
      const running = idem.steps({ tenant: 'acme', operation: 'pay', key }, (op) =>
        op.call('charge', async ({ key: chargeKey }) => {
          g.reached();
          await g.opened;
          return chargeAt(provider, chargeKey, 5);
        }),
      );
      await g.arrived;
      // While the call runs, operators see that an external call may have happened.
      expect(await row(key)).toMatchObject({ state: 'pending', recovery_point: 'call:charge', fence: 1 });
      expect(await callRow(key, 'charge')).toMatchObject({ kind: 'call', result: null, fence: 1 });
      expect((await callRow(key, 'charge'))?.started_at).toBeInstanceOf(Date);
      g.open();
      const { value } = await running;
      expect(await row(key)).toMatchObject({ state: 'completed', recovery_point: 'charge' });
      expect(await callRow(key, 'charge')).toMatchObject({ kind: 'call', result: JSON.stringify(value) });
    });

    it('a heartbeat keeps a call three times longer than the lease alive; retries meanwhile are told to wait', async () => {
      const clock = new ManualClock(Date.now());
      const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: lease, waitMs: 0 });
      const spec = { tenant: 'acme', operation: 'pay', key: `beat-${randomBytes(4).toString('hex')}` };
      const chargeKey = deriveKey(spec, 'charge');
      const g = gate();
      const running = idem.steps(spec, (op) =>
        op.call('charge', async ({ key, signal }) => {
          g.reached();
          await g.opened;
          expect(signal.aborted).toBe(false);
          return chargeAt(provider, key, 5, signal);
        }),
      );
      await g.arrived;
      const heartbeat = defaultHeartbeatMs(lease); // the default: a third of the lease
      expect(heartbeat).toBe(333);
      for (let beat = 1; beat <= 10; beat++) {
        await soon(() => clock.waiting > 0, 'the heartbeat to wait for its next beat');
        clock.advance(heartbeat + 1); // 10 beats: 3340 ms, more than three leases
        const renewedUntil = clock.now() + lease;
        await soon(async () => (await row(spec.key)).locked_until.getTime() === renewedUntil, `beat ${beat}`);
        const duplicate = await idem.steps(spec, async () => 'duplicate').catch((e: unknown) => e);
        expect(isInProgress(duplicate)).toBe(true);
      }
      g.open();
      const result = await running;
      expect(result.replayed).toBe(false);
      expect(await row(spec.key)).toMatchObject({ state: 'completed', fence: 1 });
      expect(provider.calls.filter((c) => c.key === chargeKey)).toHaveLength(1);
      expect(clock.waiting).toBe(0); // the heartbeat stopped with the call
    });

    it("a takeover during a long call: the old holder's call is aborted and its record fenced; the new holder repeats the call with the same key", async () => {
      const clock = new ManualClock(Date.now());
      const stalled = partitionable(fromPg(db.pool));
      const old = createIdem({ sql: stalled.sql, schema: db.schema, clock, leaseMs: lease, waitMs: 0 });
      const successor = createIdem({
        sql: fromPg(db.pool),
        schema: db.schema,
        clock,
        leaseMs: lease,
        waitMs: 0,
      });
      const spec = { tenant: 'acme', operation: 'pay', key: `takeover-${randomBytes(4).toString('hex')}` };
      const chargeKey = deriveKey(spec, 'charge');
      const g = gate();
      let oldSignal: AbortSignal | undefined;
      const first = old
        .steps(spec, (op) =>
          op.call('charge', async ({ key, signal }) => {
            oldSignal = signal;
            const charged = await chargeAt(provider, key, 5); // the provider charges...
            g.reached();
            await g.opened; // ...and the holder stalls before it can record the answer
            return { ...charged, by: 'old' };
          }),
        )
        .catch((e: unknown) => e);
      await g.arrived;
      await soon(() => clock.waiting > 0, 'the heartbeat to be armed');
      stalled.cut(); // the old holder can no longer reach the database
      clock.advance(lease + 1); // its heartbeat fires, but the renewal is stuck at the partition
      await soon(() => stalled.waiting > 0, 'the renewal to hang');

      const second = await successor.steps(spec, async (op) => {
        expect(op.resumed).toBe(true);
        expect(op.fence).toBe(2);
        return op.call('charge', async ({ key }) => ({
          ...(await chargeAt(provider, key, 5)),
          by: 'successor',
        }));
      });
      expect(second.value.by).toBe('successor');

      stalled.heal(); // the stuck renewal goes through, finds the fence raised, aborts the call
      await soon(() => oldSignal?.aborted === true, "the old holder's signal to abort");
      g.open();
      expect(isFenced(await first)).toBe(true);

      const calls = provider.calls.filter((c) => c.key === chargeKey);
      expect(calls).toHaveLength(2); // the old holder's call and the repeat, one key...
      expect(provider.charges.get(chargeKey)?.id).toBe(second.value.id); // ...and one charge
      expect(await callRow(spec.key, 'charge')).toMatchObject({
        kind: 'call',
        fence: 2,
        result: JSON.stringify(second.value),
      });
      expect(await row(spec.key)).toMatchObject({ state: 'completed', fence: 2 });
      const replay = await successor.steps(spec, async () => ({ id: 'x', by: 'x' }));
      expect(replay).toMatchObject({ replayed: true, value: second.value });
    });
  });
});
