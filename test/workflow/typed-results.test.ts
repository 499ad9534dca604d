/**
 * Saga step results keep their types across a resume (migration 0009): an action's result, as
 * later steps see it and as the saga's result returns it, is the same, with the same types, in
 * the run that recorded it, in the run that took over after a crash, and in a replay of the
 * completed saga. A step whose result would not come back as itself fails (and is compensated)
 * with the typed error, and nothing of it is stored. Real PostgreSQL.
 */
import { isDeepStrictEqual } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { createSagas, defineSaga, isSagaFailed, step, type SagasOptions } from '../../src/workflow/index.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { SteppingClock } from './support/stepping-clock.js';

const lease = 10_000;

const quote = () => ({
  at: new Date('2026-03-01T10:00:00.123Z'),
  big: 2n ** 70n,
  bytes: new Uint8Array([0, 1, 255]),
  map: new Map([['eur', 1999n]]),
  set: new Set([new Date(0)]),
  nothing: undefined,
});
const charge = () => ({ id: 'ch_1', amount: 2n ** 64n, at: new Date(1), receipt: Buffer.from('ok') });

describe('saga step results across a resume', () => {
  let db: TestSchema;
  let clock: SteppingClock;
  let counter = 0;

  beforeAll(async () => {
    db = await createTestSchema({ poolSize: 4 });
    clock = new SteppingClock();
  });
  afterAll(async () => {
    await db.close();
  });

  /** What the last step saw of the earlier steps' results, per run. */
  const seen: unknown[] = [];
  const checkout = defineSaga<{ order: string }, Record<string, unknown>>({
    name: 'typed-checkout',
    steps: [
      step({ name: 'quote', action: async () => quote() }),
      step({ name: 'charge', call: async () => charge(), compensateCall: async () => ({ refunded: 1n }) }),
      step({
        name: 'confirm',
        action: async ({ results }) => {
          seen.push(results);
          return { confirmedAt: new Date(2) };
        },
      }),
    ],
  });

  const engine = (options: Partial<SagasOptions> = {}) =>
    createSagas({
      sql: fromPg(db.pool),
      schema: db.schema,
      clock,
      leaseMs: lease,
      sagas: [checkout as never],
      ...options,
    });

  it('the results a later step sees, the saga result and the replay keep their types after a crash', async () => {
    const key = `typed-${++counter}`;
    const spec = { tenant: 'acme', key, input: { order: key } };
    const firstRun: unknown[] = [];
    const crash = new Error('crash after the charge was recorded');
    const dying = engine({
      hooks: {
        at: (point) => {
          if (point.at === 'action:recorded' && point.step === 'charge') throw crash;
        },
      },
    });
    await expect(dying.run(checkout, spec)).rejects.toBe(crash);
    // What this run recorded, read back (the record is what a resume starts from).
    const recorded = (await dying.get({ tenant: 'acme', saga: 'typed-checkout', key }, { steps: true }))!;
    firstRun.push(recorded.steps![0]!.result, recorded.steps![1]!.result);
    expect(firstRun).toStrictEqual([quote(), charge()]);

    clock.advance(lease + 1);
    seen.length = 0;
    const resumed = await engine().run(checkout, spec);
    expect(resumed.resumed).toBe(true);
    const expected = { quote: quote(), charge: charge(), confirm: { confirmedAt: new Date(2) } };
    // The step that ran after the resume saw the first run's results with their types.
    expect(seen).toStrictEqual([{ quote: quote(), charge: charge() }]);
    expect(resumed.value).toStrictEqual(expected);
    expect(isDeepStrictEqual(resumed.value, expected)).toBe(true);

    const replay = await engine().run(checkout, spec);
    expect(replay.replayed).toBe(true);
    expect(replay.value).toStrictEqual(expected);
    expect((replay.value.charge as ReturnType<typeof charge>).receipt).toBeInstanceOf(Buffer);

    // Operators read plain JSON.
    const { rows } = await db.pool.query<{ name: string; result: string; result_meta: string | null }>(
      `SELECT name, result, result_meta FROM "${db.schema}".saga_steps WHERE saga_key = $1 ORDER BY position`,
      [key],
    );
    expect(JSON.parse(rows[1]!.result)).toEqual({
      id: 'ch_1',
      amount: '18446744073709551616',
      at: '1970-01-01T00:00:00.001Z',
      receipt: 'b2s=',
    });
    expect(rows.every((r) => r.result_meta !== null)).toBe(true);
    const saga = await db.pool.query<{ result: string; result_meta: string }>(
      `SELECT result, result_meta FROM "${db.schema}".sagas WHERE saga_key = $1`,
      [key],
    );
    expect(JSON.parse(saga.rows[0]!.result)).toMatchObject({ quote: { at: '2026-03-01T10:00:00.123Z' } });
  });

  it('a step returning a function fails with the typed error, stores nothing, and the saga compensates', async () => {
    const key = `bad-${++counter}`;
    let compensated = 0;
    const bad = defineSaga<{ order: string }, unknown>({
      name: 'typed-bad',
      steps: [
        step({
          name: 'reserve',
          action: async () => ({ id: 'r1', at: new Date(3) }),
          compensate: async ({ result }) => {
            expect((result as { at: Date }).at).toBeInstanceOf(Date);
            compensated++;
          },
        }),
        step({ name: 'price', action: async () => ({ total: 5, format: () => '5.00' }) }),
      ],
    });
    const error = await engine({ sagas: [bad as never] })
      .run(bad, { tenant: 'acme', key, input: { order: key } })
      .catch((e: unknown) => e);
    expect(isSagaFailed(error)).toBe(true);
    const cause = (error as Error).cause as { code?: string; message?: string };
    expect(cause.code).toBe('IDEM_INVALID_ARGUMENT');
    expect(cause.message).toMatch(/^step "price" returned a function \(format\) at result\.format/);
    expect(compensated).toBe(1);
    const { rows } = await db.pool.query(
      `SELECT name, state, result, result_meta FROM "${db.schema}".saga_steps WHERE saga_key = $1 ORDER BY position`,
      [key],
    );
    expect(rows[1]).toEqual({ name: 'price', state: 'compensated', result: null, result_meta: null });
  });
});
