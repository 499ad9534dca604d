import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import { isFenced, isInProgress } from '../../src/core/errors.js';
import { deriveKey } from '../../src/core/keys.js';
import { createIdem } from '../../src/operations/idem.js';
import { createClient, currentIdempotencyKey } from '../../src/client/index.js';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { startFakeProvider, type FakeProvider } from '../support/fake-provider.js';

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

  beforeAll(async () => {
    db = await createTestSchema();
    await db.pool.query(
      `CREATE TABLE "${db.schema}".effects (id serial PRIMARY KEY, tenant text NOT NULL, intent text NOT NULL, payload jsonb)`,
    );
    provider = await startFakeProvider();
  });
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
    const client = createClient({ baseUrl: provider.url });
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
});
