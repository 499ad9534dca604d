import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { assertOk, createResilientClient } from '../../src/client/index.js';
import { currentIdempotencyKey } from '../../src/core/key-context.js';
import { ManualClock } from '../../src/core/clock.js';
import { createEvents } from '../../src/core/event-channel.js';
import { isFenced, isInProgress, isKeyReused } from '../../src/core/errors.js';
import type { Queryable } from '../../src/core/sql.js';
import {
  createSagas,
  defineSaga,
  isSagaFailed,
  isSagaStuck,
  step,
  stepKeys,
  type SagaPoint,
  type SagaRef,
  type SagasOptions,
} from '../../src/workflow/index.js';
import { startProvider, type Provider } from '../support/client/provider.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { partitionable } from '../support/partition.js';
import { SteppingClock } from './support/stepping-clock.js';

interface TripInput {
  trip: string;
  /** When set, the flight step's action fails for good after its call (no seat confirmed). */
  flightFails: boolean;
}

const lease = 10_000;

describe('sagas', () => {
  let db: TestSchema;
  let provider: Provider;
  let clock: SteppingClock;
  let counter = 0;
  const http = createResilientClient({ breaker: false, maxAttempts: 1 });

  beforeAll(async () => {
    db = await createTestSchema({ poolSize: 8 });
    provider = await startProvider();
    clock = new SteppingClock();
    await db.pool.query(
      `CREATE TABLE "${db.schema}".ledger (id serial PRIMARY KEY, saga_key text NOT NULL, entry text NOT NULL, step_key text NOT NULL)`,
    );
  });
  afterEach(() => provider.reset());
  afterAll(async () => {
    await provider.stop();
    await db.close();
  });

  /**
   * A step body that calls the provider with no transaction open (the client sends the step's key
   * by itself), then books a local row, with the key it was given, in the transaction that records
   * the result. `fail` throws after the provider's effect, like a timeout after the work was done.
   */
  function callEffect(kind: string, fail?: (input: TripInput) => boolean) {
    return {
      call: async ({ input, key }: { input: TripInput; key: string }) => {
        const res = await assertOk(
          await http.fetch(`${provider.url}/effects/${kind}`, { method: 'POST', body: input.trip }),
        );
        const id = ((await res.json()) as { id: string }).id;
        expect(currentIdempotencyKey()).toBe(key);
        if (fail?.(input)) throw new TypeError(`${kind} booked but no seat confirmed`);
        return id;
      },
      record: async ({ tx, input, key }: { tx: Queryable; input: TripInput; key: string }) => {
        await tx.query(`INSERT INTO "${db.schema}".ledger (saga_key, entry, step_key) VALUES ($1, $2, $3)`, [
          input.trip,
          kind,
          key,
        ]);
      },
    };
  }

  /** The same, as a step's action (`call` + `record`) or its compensation. */
  const action = (kind: string, fail?: (input: TripInput) => boolean) => callEffect(kind, fail);
  const compensation = (kind: string) => {
    const { call, record } = callEffect(kind);
    return { compensateCall: call, recordCompensation: record };
  };

  const trip = defineSaga<TripInput, { hotel: unknown; charge: unknown; flight: unknown }>({
    name: 'trip',
    steps: [
      step({ name: 'hotel', ...action('hotel'), ...compensation('hotel-cancel') }),
      step({ name: 'charge', ...action('charge'), ...compensation('refund') }),
      step({
        name: 'flight',
        ...action('flight', (input) => input.flightFails),
        ...compensation('flight-cancel'),
      }),
    ],
    result: (results) => ({ hotel: results.hotel, charge: results.charge, flight: results.flight }),
  });

  function engine(options: Partial<SagasOptions> = {}) {
    return createSagas({
      sql: fromPg(db.pool),
      schema: db.schema,
      clock,
      leaseMs: lease,
      sagas: [trip as never],
      ...options,
    });
  }

  async function ledger(sagaKey: string): Promise<string[]> {
    const { rows } = await db.pool.query<{ entry: string }>(
      `SELECT entry FROM "${db.schema}".ledger WHERE saga_key = $1 ORDER BY id`,
      [sagaKey],
    );
    return rows.map((r) => r.entry);
  }

  /** Provider effects for one saga, in order. */
  const effectsOf = (sagaKey: string) =>
    provider.effects.filter((e) => e.body === sagaKey).map((e) => e.kind);

  function expectCompensatedOnce(sagaKey: string) {
    const kinds = effectsOf(sagaKey);
    // Every action and every compensation had exactly one effect downstream, compensations in reverse order.
    expect(kinds).toEqual(['hotel', 'charge', 'flight', 'flight-cancel', 'refund', 'hotel-cancel']);
  }

  it('completes forward; a retry replays the stored result without calling anything', async () => {
    const sagas = engine();
    const spec = {
      tenant: 'acme',
      key: `ok-${++counter}`,
      input: { trip: `ok-${counter}`, flightFails: false },
    };
    const first = await sagas.run(trip, spec);
    expect(first.replayed).toBe(false);
    expect(first.value.flight).toMatch(/^flight_/);
    const again = await sagas.run(trip, spec);
    expect(again).toEqual({ value: first.value, replayed: true, resumed: false });
    expect(effectsOf(spec.input.trip)).toEqual(['hotel', 'charge', 'flight']);
    expect(await ledger(spec.input.trip)).toEqual(['hotel', 'charge', 'flight']);
    await expect(sagas.run(trip, { ...spec, input: { ...spec.input, flightFails: true } })).rejects.toSatisfy(
      isKeyReused,
    );
  });

  it("runIn starts the saga in the caller's transaction: a rollback leaves nothing, a commit is driven by run or recover", async () => {
    const sagas = engine();
    const sql = fromPg(db.pool);
    const spec = (key: string) => ({ tenant: 'acme', key, input: { trip: key, flightFails: false } });
    const rolledBack = `in-rb-${++counter}`;
    await expect(
      sql.transaction(async (tx) => {
        expect(await sagas.runIn(tx, trip, spec(rolledBack))).toEqual({
          saga: { tenant: 'acme', saga: 'trip', key: rolledBack },
          created: true,
        });
        throw new Error('the caller rolls back');
      }),
    ).rejects.toThrow('the caller rolls back');
    expect(await sagas.get({ tenant: 'acme', saga: 'trip', key: rolledBack })).toBeNull();
    expect(effectsOf(rolledBack)).toEqual([]);

    const committed = `in-ok-${++counter}`;
    await sql.transaction(async (tx) => {
      expect((await sagas.runIn(tx, trip, spec(committed))).created).toBe(true);
      expect((await sagas.runIn(tx, trip, spec(committed))).created).toBe(false);
    });
    expect(effectsOf(committed)).toEqual([]); // no step ran inside the caller's transaction
    await sql.transaction(async (tx) => {
      await expect(
        sagas.runIn(tx, trip, { ...spec(committed), input: { trip: committed, flightFails: true } }),
      ).rejects.toSatisfy(isKeyReused);
    });
    const driven = await sagas.run(trip, spec(committed));
    expect(driven.value.flight).toMatch(/^flight_/);
    expect(effectsOf(committed)).toEqual(['hotel', 'charge', 'flight']);

    const recovered = `in-rec-${++counter}`;
    await sql.transaction((tx) => sagas.runIn(tx, trip, spec(recovered)));
    const outcomes = await sagas.recover();
    expect(outcomes).toContainEqual({
      saga: { tenant: 'acme', saga: 'trip', key: recovered },
      outcome: 'completed',
    });
    expect(effectsOf(recovered)).toEqual(['hotel', 'charge', 'flight']);
  });

  it('derives a distinct, stable key for every action and compensation, and sends it downstream', async () => {
    const sagas = engine();
    const ref: SagaRef = { tenant: 'acme', saga: 'trip', key: `keys-${++counter}` };
    await expect(sagas.run(trip, { ...ref, input: { trip: ref.key, flightFails: true } })).rejects.toSatisfy(
      isSagaFailed,
    );
    const record = (await sagas.get(ref, { steps: true }))!;
    const keys = record.steps!.flatMap((s) => [s.actionKey, s.compensationKey!]);
    expect(new Set(keys).size).toBe(6);
    record.steps!.forEach((s) => {
      expect(stepKeys(ref, s.position, s.name)).toEqual({
        action: s.actionKey,
        compensation: s.compensationKey,
      });
    });
    // The same step of another instance gets other keys.
    expect(stepKeys({ ...ref, key: 'other' }, 0, 'hotel').action).not.toBe(record.steps![0]!.actionKey);
    const seen = provider.effects.filter((e) => e.body === ref.key).map((e) => e.key);
    expect(seen).toEqual([
      record.steps![0]!.actionKey,
      record.steps![1]!.actionKey,
      record.steps![2]!.actionKey,
      record.steps![2]!.compensationKey,
      record.steps![1]!.compensationKey,
      record.steps![0]!.compensationKey,
    ]);
  });

  it('compensates the started steps in reverse order, each once, and replays the failure', async () => {
    const sagas = engine();
    const spec = {
      tenant: 'acme',
      key: `fail-${++counter}`,
      input: { trip: `fail-${counter}`, flightFails: true },
    };
    const error = await sagas.run(trip, spec).catch((e: unknown) => e);
    expect(isSagaFailed(error)).toBe(true);
    expect((error as Error).message).toContain('flight booked but no seat confirmed');
    expect(((error as Error).cause as Error).name).toBe('TypeError');
    expectCompensatedOnce(spec.input.trip);
    // The flight action's local row rolled back with its failure; every compensation's row committed.
    expect(await ledger(spec.input.trip)).toEqual([
      'hotel',
      'charge',
      'flight-cancel',
      'refund',
      'hotel-cancel',
    ]);
    const record = (await sagas.get({ tenant: 'acme', saga: 'trip', key: spec.key }, { steps: true }))!;
    expect(record.status).toBe('compensated');
    expect(record.cursor).toBe(-1);
    expect(record.steps!.map((s) => s.state)).toEqual(['compensated', 'compensated', 'compensated']);
    const replay = await sagas.run(trip, spec).catch((e: unknown) => e);
    expect(isSagaFailed(replay) && replay.replayed).toBe(true);
    expect(effectsOf(spec.input.trip)).toHaveLength(6);
  });

  it('retries a retryable action failure in place with backoff: one effect', async () => {
    const sagas = engine();
    const spec = {
      tenant: 'acme',
      key: `flaky-${++counter}`,
      input: { trip: `flaky-${counter}`, flightFails: false },
    };
    provider.respond({ status: 503 }, { status: 500, afterEffect: true }); // the hotel call, twice
    const sleepsBefore = clock.sleeps.length;
    await sagas.run(trip, spec);
    expect(clock.sleeps.length - sleepsBefore).toBe(2);
    expect(effectsOf(spec.input.trip)).toEqual(['hotel', 'charge', 'flight']);
    expect(await ledger(spec.input.trip)).toEqual(['hotel', 'charge', 'flight']);
  });

  it("waits as long as a failure's retryAfterMs asks, capped at maxRetryAfterMs", async () => {
    const sagas = engine({ maxRetryAfterMs: 5000 });
    const asks = [3_600_000, 2000];
    const patient = defineSaga<{ n: number }>({
      name: 'patient',
      steps: [
        step({
          name: 'busy',
          action: () => {
            const retryAfterMs = asks.shift();
            if (retryAfterMs === undefined) return Promise.resolve('done');
            return Promise.reject(Object.assign(new Error('busy'), { status: 503, retryAfterMs }));
          },
        }),
      ],
    });
    const sleepsBefore = clock.sleeps.length;
    await sagas.run(patient, { tenant: 'acme', key: `patient-${++counter}`, input: { n: 1 } });
    expect(clock.sleeps.slice(sleepsBefore)).toEqual([5000, 2000]);
  });

  it('refuses a second process while the lease holds, and fences a stalled holder after a takeover', async () => {
    const key = `lease-${++counter}`;
    const spec = { tenant: 'acme', key, input: { trip: key, flightFails: false } };
    let release!: () => void;
    const stalled = new Promise<void>((resolve) => (release = resolve));
    let paused = false;
    const slow = engine({
      hooks: {
        at: async (point) => {
          if (point.at === 'step:registered' && point.position === 1 && !paused) {
            paused = true;
            await stalled; // a GC pause or a partition: the holder stops between steps
          }
        },
      },
    });
    const first = slow.run(trip, spec);
    await until(() => paused);
    await expect(engine().run(trip, spec)).rejects.toSatisfy(isInProgress);
    clock.advance(lease + 1);
    const taken = await engine().run(trip, spec);
    expect(taken.resumed).toBe(true);
    release();
    await expect(first).rejects.toSatisfy(isFenced);
    expect(effectsOf(key)).toEqual(['hotel', 'charge', 'flight']);
    expect(await ledger(key)).toEqual(['hotel', 'charge', 'flight']);
  });

  /** Every point a clean run passes, with its occurrence number. */
  async function pointsOf(input: (key: string) => TripInput): Promise<string[]> {
    const seen: string[] = [];
    const key = `probe-${++counter}`;
    const sagas = engine({ hooks: { at: (point) => void seen.push(label(point)) } });
    await sagas.run(trip, { tenant: 'acme', key, input: input(key) }).catch((e: unknown) => {
      if (!isSagaFailed(e)) throw e;
    });
    return seen;
  }

  for (const flightFails of [true, false]) {
    const kind = flightFails ? 'a failing saga' : 'a succeeding saga';

    it(`${kind}: a crash at every point, then a resume, gives each effect exactly once`, async () => {
      const points = await pointsOf((key) => ({ trip: key, flightFails }));
      expect(points.length).toBeGreaterThan(flightFails ? 25 : 15);
      for (let crashAt = 0; crashAt < points.length; crashAt++) {
        const key = `crash-${flightFails ? 'f' : 's'}-${crashAt}-${++counter}`;
        const spec = { tenant: 'acme', key, input: { trip: key, flightFails } };
        let passed = 0;
        const crash = new Error(`crash at ${points[crashAt]}`);
        const dying = engine({
          hooks: {
            at: () => {
              if (passed++ === crashAt) throw crash;
            },
          },
        });
        await expect(dying.run(trip, spec)).rejects.toBe(crash);
        clock.advance(lease + 1);
        // Half the cases resume through the recovery sweep, half through the caller's retry.
        const survivor = engine();
        if (crashAt % 2 === 0) {
          await survivor.recover();
        }
        const outcome = await survivor.run(trip, spec).then(
          () => 'completed',
          (e: unknown) => (isSagaFailed(e) ? 'compensated' : e),
        );
        expect([points[crashAt], outcome]).toEqual([
          points[crashAt],
          flightFails ? 'compensated' : 'completed',
        ]);
        if (flightFails) {
          expectCompensatedOnce(key);
          expect(await ledger(key)).toEqual(['hotel', 'charge', 'flight-cancel', 'refund', 'hotel-cancel']);
        } else {
          expect(effectsOf(key)).toEqual(['hotel', 'charge', 'flight']);
          expect(await ledger(key)).toEqual(['hotel', 'charge', 'flight']);
        }
      }
    });
  }

  it('a failing saga crashed at every point in turn, resumed after each crash, still compensates once', async () => {
    const key = `chain-${++counter}`;
    const spec = { tenant: 'acme', key, input: { trip: key, flightFails: true } };
    const crashed = new Set<string>();
    let crashes = 0;
    for (let round = 0; round < 100; round++) {
      const occurrences = new Map<string, number>();
      const sagas = engine({
        hooks: {
          at: (point) => {
            const base = label(point);
            const n = (occurrences.get(base) ?? 0) + 1;
            occurrences.set(base, n);
            const site = `${base}#${n}`;
            if (!crashed.has(site)) {
              crashed.add(site);
              throw new Error(`crash at ${site}`);
            }
          },
        },
      });
      const outcome = await sagas.run(trip, spec).catch((e: unknown) => e);
      if (isSagaFailed(outcome)) break;
      expect(String(outcome)).toContain('crash at');
      crashes++;
      clock.advance(lease + 1);
    }
    expect(crashes).toBeGreaterThan(25);
    expectCompensatedOnce(key);
    expect(await ledger(key)).toEqual(['hotel', 'charge', 'flight-cancel', 'refund', 'hotel-cancel']);
  });

  it('retries a failing compensation with backoff, then parks the saga as stuck for an operator', async () => {
    const stuckSeen: string[] = [];
    const events = createEvents();
    events.on('saga:stuck', ({ saga, step, error }) =>
      stuckSeen.push(`${saga.key} ${step} ${(error as Error).message.includes('503')}`),
    );
    const sagas = engine({ compensationAttempts: 3, events });
    const key = `stuck-${++counter}`;
    const ref: SagaRef = { tenant: 'acme', saga: 'trip', key };
    provider.breakPath('/effects/refund', 503);
    const sleepsBefore = clock.sleeps.length;
    const error = await sagas
      .run(trip, { ...ref, input: { trip: key, flightFails: true } })
      .catch((e: unknown) => e);
    expect(isSagaStuck(error)).toBe(true);
    expect(stuckSeen).toEqual([`${key} charge true`]);
    expect(clock.sleeps.length - sleepsBefore).toBe(2); // three attempts, two backoff waits
    expect(provider.requests.filter((r) => r.path === '/effects/refund')).toHaveLength(3);
    // Stopped at the refund: the hotel is not cancelled out of order.
    expect(effectsOf(key)).toEqual(['hotel', 'charge', 'flight', 'flight-cancel']);

    const stuck = await sagas.list();
    const listed = stuck.find((s) => s.key === key)!;
    expect(listed.status).toBe('stuck');
    expect(listed.stuckError).toContain('503');
    expect(listed.error).toContain('no seat confirmed');
    // A caller's retry does not touch a stuck saga; recovery leaves it to the operator.
    await expect(sagas.run(trip, { ...ref, input: { trip: key, flightFails: true } })).rejects.toSatisfy(
      isSagaStuck,
    );
    clock.advance(lease + 1);
    expect((await sagas.recover()).find((r) => r.saga.key === key)).toBeUndefined();

    // Still broken: the operator's retry gets stuck again, with fresh attempts.
    await expect(sagas.retry(ref)).rejects.toSatisfy(isSagaStuck);
    provider.fixPath('/effects/refund');
    const done = await sagas.retry(ref);
    expect(done.status).toBe('compensated');
    expectCompensatedOnce(key);
    expect(await ledger(key)).toEqual(['hotel', 'charge', 'flight-cancel', 'refund', 'hotel-cancel']);
  });

  it('sweeps finished sagas past their retention with their steps, never an unfinished one; the key is then new', async () => {
    const retentionMs = 3_600_000;
    const sagas = engine({ retentionMs });
    const spec = (name: string, flightFails: boolean) => ({
      tenant: 'acme',
      key: `${name}-${++counter}`,
      input: { trip: `${name}-${counter}`, flightFails },
    });
    const done = spec('swept-done', false);
    const failed = spec('swept-failed', true);
    const running = spec('swept-running', false);
    await sagas.run(trip, done);
    await expect(sagas.run(trip, failed)).rejects.toSatisfy(isSagaFailed);
    const crashing = engine({
      retentionMs,
      hooks: {
        at: (point) => {
          if (point.at === 'action:before' && point.step === 'charge') throw new Error('crash');
        },
      },
    });
    await expect(crashing.run(trip, running)).rejects.toThrow('crash');
    const present = async (key: string) => {
      const { rows } = await db.pool.query<{ sagas: number; steps: number }>(
        `SELECT (SELECT count(*)::int FROM "${db.schema}".sagas WHERE saga_key = $1) AS sagas,
                (SELECT count(*)::int FROM "${db.schema}".saga_steps WHERE saga_key = $1) AS steps`,
        [key],
      );
      return rows[0]!;
    };
    expect(await present(done.key)).toEqual({ sagas: 1, steps: 3 });

    clock.advance(retentionMs - 1000);
    await sagas.sweep();
    expect(await present(done.key)).toEqual({ sagas: 1, steps: 3 });
    expect(await present(failed.key)).toEqual({ sagas: 1, steps: 3 });

    clock.advance(2000);
    const swept = await sagas.sweep({ batchSize: 1 });
    expect(swept.deleted).toBeGreaterThanOrEqual(2);
    expect(await present(done.key)).toEqual({ sagas: 0, steps: 0 });
    expect(await present(failed.key)).toEqual({ sagas: 0, steps: 0 });
    expect(await present(running.key)).toEqual({ sagas: 1, steps: 2 }); // unfinished: kept
    await expect(sagas.sweep()).resolves.toEqual({ deleted: 0, cleared: 0 });

    // Past retention the key is new: the saga runs again (its local writes happen again), with the
    // same derived keys downstream, so a provider that still remembers them charges nothing twice.
    const again = await sagas.run(trip, done);
    expect(again.replayed).toBe(false);
    expect(await ledger(done.input.trip)).toEqual(['hotel', 'charge', 'flight', 'hotel', 'charge', 'flight']);
    expect(effectsOf(done.input.trip)).toEqual(['hotel', 'charge', 'flight']);
  });

  it('refuses to resume an instance whose recorded steps no longer match the definition', async () => {
    const key = `mismatch-${++counter}`;
    const crash = new Error('crash');
    const sagas = engine({
      hooks: {
        at: (p) => {
          if (p.at === 'action:recorded') throw crash;
        },
      },
    });
    await expect(
      sagas.run(trip, { tenant: 'acme', key, input: { trip: key, flightFails: false } }),
    ).rejects.toBe(crash);
    clock.advance(lease + 1);
    const renamed = defineSaga<TripInput>({
      ...trip,
      name: 'trip',
      steps: [{ ...trip.steps[0]!, name: 'inn' }],
    });
    const other = createSagas({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: lease });
    await expect(
      other.run(renamed, { tenant: 'acme', key, input: { trip: key, flightFails: false } }),
    ).rejects.toThrow(/keep steps append-only/);
  });

  it('local actions and compensations run in the step transaction; defineSaga refuses a step with both or neither kind', async () => {
    const key = `local-${++counter}`;
    const book = (tx: Queryable, entry: string, stepKey: string) =>
      tx.query(`INSERT INTO "${db.schema}".ledger (saga_key, entry, step_key) VALUES ($1, $2, $3)`, [
        key,
        entry,
        stepKey,
      ]);
    const local = defineSaga<{ fail: boolean }>({
      name: 'local-only',
      steps: [
        step({
          name: 'debit',
          action: async ({ tx, key: stepKey }) => (await book(tx, 'debit', stepKey)).rowCount,
          compensate: async ({ tx, key: stepKey, actionCompleted, result }) => {
            expect(actionCompleted).toBe(true);
            expect(result).toBe(1);
            await book(tx, 'credit', stepKey);
          },
        }),
        step({
          name: 'check',
          action: async ({ tx, input, key: stepKey }) => {
            await book(tx, 'check', stepKey);
            if (input.fail) throw new RangeError('over the limit');
          },
        }),
      ],
    });
    const sagas = engine({ sagas: [local] });
    await expect(sagas.run(local, { tenant: 'acme', key, input: { fail: true } })).rejects.toSatisfy(
      isSagaFailed,
    );
    // The failing action's own row rolled back with it; the compensation's committed.
    expect(await ledger(key)).toEqual(['debit', 'credit']);

    const bad = (fields: Record<string, unknown>) => () =>
      defineSaga({ name: 'bad', steps: [{ name: 'x', ...fields } as never] });
    const fn = async () => null;
    expect(bad({ action: fn, call: fn })).toThrow(/exactly one of action/);
    expect(bad({})).toThrow(/exactly one of action/);
    expect(bad({ action: fn, record: fn })).toThrow(/record goes with call/);
    expect(bad({ call: fn, compensate: fn, compensateCall: fn })).toThrow(/at most one of compensate/);
    expect(bad({ call: fn, recordCompensation: fn })).toThrow(/recordCompensation goes with compensateCall/);
    expect(bad({ call: { not: 'a function' } })).toThrow(/must be a function/);
  });

  it('a call longer than the lease keeps it by heartbeats; a takeover during a call fences the old holder, which cannot record', async () => {
    const clock = new ManualClock(Date.now());
    const key = `long-call-${++counter}`;
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let reached!: () => void;
    const atCall = new Promise<void>((resolve) => (reached = resolve));
    let oldSignal: AbortSignal | undefined;
    const long = defineSaga<{ n: number }>({
      name: 'long-call',
      steps: [
        step({
          name: 'pay',
          call: async ({ signal, key: stepKey }) => {
            oldSignal ??= signal;
            if (signal === oldSignal) {
              reached();
              await released;
            }
            return stepKey;
          },
          record: async ({ tx, response }) => {
            await tx.query(
              `INSERT INTO "${db.schema}".ledger (saga_key, entry, step_key) VALUES ($1, 'pay', $2)`,
              [key, response],
            );
          },
        }),
      ],
    });
    const leaseMs = 900;
    const options = { sql: fromPg(db.pool), schema: db.schema, clock, leaseMs, sagas: [long as never] };
    const stalled = partitionable(fromPg(db.pool));
    const holder = createSagas({ ...options, sql: stalled.sql });
    const first = holder.run(long, { tenant: 'acme', key, input: { n: 1 } }).catch((e: unknown) => e);
    await atCall;
    // Three leases long, the heartbeat keeps it: a second process is told to wait.
    for (let beat = 0; beat < 9; beat++) {
      await waitFor(() => clock.waiting > 0);
      clock.advance(holder.heartbeatMs + 1);
      const renewed = clock.now() + leaseMs;
      await waitFor(
        async () => (await holder.get({ tenant: 'acme', saga: 'long-call', key }))?.lockedUntil === renewed,
      );
    }
    await expect(createSagas(options).run(long, { tenant: 'acme', key, input: { n: 1 } })).rejects.toSatisfy(
      isInProgress,
    );
    // Now the holder stalls (partitioned from the database); its lease lapses and it is taken over.
    await waitFor(() => clock.waiting > 0);
    stalled.cut();
    clock.advance(leaseMs + 1);
    const taken = await createSagas(options).run(long, { tenant: 'acme', key, input: { n: 1 } });
    expect(taken.resumed).toBe(true);
    stalled.heal();
    await waitFor(() => oldSignal?.aborted === true);
    release();
    expect(isFenced(await first)).toBe(true);
    expect(await ledger(key)).toEqual(['pay']); // recorded once, by the new holder
  });
});

function label(point: SagaPoint): string {
  return [point.at, 'position' in point ? point.position : '', 'status' in point ? point.status : ''].join(
    ':',
  );
}

async function waitFor(condition: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error('condition not reached');
}

async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  if (!condition()) throw new Error('condition not reached');
}
