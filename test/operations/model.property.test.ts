/**
 * Random interleavings of requests, retries, concurrent duplicates, crashes and expiry, checked
 * against a model: at most one effect per intent (per retention epoch) and every replay equal to
 * the first result.
 */
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import { isExpired, isKeyReused, isOperationFailed } from '../../src/core/errors.js';
import { fingerprint } from '../../src/core/fingerprint.js';
import { createIdem, type Idem } from '../../src/operations/idem.js';
import { createTestSchema, type TestSchema } from '../support/database.js';

const hour = 3_600_000;
const retention = { resultMs: 24 * hour, tombstoneMs: 72 * hour };

type Command =
  | { kind: 'call'; key: number; payload: number; crash: boolean }
  | { kind: 'burst'; key: number; payload: number; size: number }
  | { kind: 'advance'; ms: number };

const command: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('call' as const),
      key: fc.nat(2),
      payload: fc.nat(1),
      crash: fc.boolean(),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('burst' as const),
      key: fc.nat(2),
      payload: fc.nat(1),
      size: fc.integer({ min: 2, max: 8 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('advance' as const),
      ms: fc.constantFrom(hour, 23 * hour, 25 * hour, 50 * hour),
    }),
  },
);

interface ModelRecord {
  fingerprint: string;
  value: number;
  resultUntil: number;
  tombstoneUntil: number;
}

type Expected =
  | { kind: 'executed' }
  | { kind: 'replay'; value: number }
  | { kind: 'reused' }
  | { kind: 'expired' }
  | { kind: 'failed' };

function expect_(record: ModelRecord | undefined, fp: string, now: number, crash: boolean): Expected {
  if (!record || record.tombstoneUntil <= now) return crash ? { kind: 'failed' } : { kind: 'executed' };
  if (record.fingerprint !== fp) return { kind: 'reused' };
  if (record.resultUntil <= now) return { kind: 'expired' };
  return { kind: 'replay', value: record.value };
}

describe('keyed operations against a model (fast-check)', () => {
  let db: TestSchema;

  beforeAll(async () => {
    db = await createTestSchema({ poolSize: 12 });
    await db.pool.query(
      `CREATE TABLE "${db.schema}".effects (id serial PRIMARY KEY, tenant text NOT NULL, intent text NOT NULL)`,
    );
  });
  afterAll(() => db.close());

  it('holds for random interleavings', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(command, { minLength: 1, maxLength: 14 }), async (commands) => {
        const tenant = `t_${randomBytes(6).toString('hex')}`;
        const clock = new ManualClock(Date.UTC(2031, 0, 1));
        const idem: Idem = createIdem({
          sql: fromPg(db.pool),
          schema: db.schema,
          clock,
          retention,
          waitMs: 10_000,
        });
        const model = new Map<number, ModelRecord>();
        const executions = new Map<number, number>();

        const call = async (key: number, payload: number, crash: boolean) =>
          idem
            .run({ tenant, operation: 'op', key: `k${key}`, request: { payload } }, async (tx) => {
              const { rows } = await tx.query<{ id: number }>(
                `INSERT INTO "${db.schema}".effects (tenant, intent) VALUES ($1, $2) RETURNING id`,
                [tenant, `k${key}`],
              );
              if (crash) throw Object.assign(new Error('crash after the write'), { retryable: true });
              return rows[0]!.id;
            })
            .then(
              (r) => ({ ok: true as const, value: r.value, replayed: r.replayed }),
              (e: unknown) => ({ ok: false as const, error: e }),
            );

        for (const c of commands) {
          if (c.kind === 'advance') {
            clock.advance(c.ms);
            continue;
          }
          const fp = fingerprint({ payload: c.payload });
          const expected = expect_(model.get(c.key), fp, clock.now(), c.kind === 'call' && c.crash);
          const outcomes =
            c.kind === 'call'
              ? [await call(c.key, c.payload, c.crash)]
              : await Promise.all(Array.from({ length: c.size }, () => call(c.key, c.payload, false)));

          if (expected.kind === 'executed') {
            const fresh = outcomes.filter((o) => o.ok && !o.replayed);
            expect(fresh).toHaveLength(1);
            const value = (fresh[0] as { value: number }).value;
            for (const o of outcomes) expect(o).toMatchObject({ ok: true, value });
            model.set(c.key, {
              fingerprint: fp,
              value,
              resultUntil: clock.now() + retention.resultMs,
              tombstoneUntil: clock.now() + retention.tombstoneMs,
            });
            executions.set(c.key, (executions.get(c.key) ?? 0) + 1);
          } else {
            for (const o of outcomes) {
              if (expected.kind === 'replay')
                expect(o).toMatchObject({ ok: true, replayed: true, value: expected.value });
              else if (expected.kind === 'reused')
                expect(isKeyReused((o as { error: unknown }).error)).toBe(true);
              else if (expected.kind === 'expired')
                expect(isExpired((o as { error: unknown }).error)).toBe(true);
              else expect(isOperationFailed((o as { error: unknown }).error)).toBe(true);
            }
          }
        }
        const { rows } = await db.pool.query<{ intent: string; n: number }>(
          `SELECT intent, count(*)::int AS n FROM "${db.schema}".effects WHERE tenant = $1 GROUP BY intent`,
          [tenant],
        );
        const actual = new Map(rows.map((r) => [Number(r.intent.slice(1)), r.n]));
        expect(actual).toEqual(executions);
      }),
      { numRuns: 40 },
    );
  });
});
