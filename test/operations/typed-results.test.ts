/**
 * Step results keep their types across a resume (migration 0009, src/steps/result-codec.ts): what
 * a step or call returned on the first run is what the run that takes over gets back, with the
 * same types (Date, BigInt, bytes, Map, Set, undefined, NaN, -0, ...), read from the real table.
 * What would not come back as itself is refused before the step's transaction commits, naming the
 * step. The result column stays plain JSON, and rows written before 0009 read as they did.
 * Real PostgreSQL; a resume is a takeover after the first holder stalled past its lease
 * (ManualClock), or a retry after a retryable failure released it.
 */
import { randomBytes } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import { isIdemError, isStepFailed } from '../../src/core/errors.js';
import { migrate } from '../../src/migrate/migrate.js';
import { createIdem, type Idem } from '../../src/operations/idem.js';
import type { MultiStepOperation } from '../../src/operations/multi-step.js';
import { decodeResult, encodeResult } from '../../src/steps/result-codec.js';
import { createTestSchema, schemaBefore, type TestSchema } from '../support/database.js';

/** Everything the issue names, and a few more, nested. */
const typed = () => ({
  at: new Date('2026-03-01T10:00:00.123Z'),
  big: 2n ** 70n,
  bytes: new Uint8Array([0, 1, 127, 255]),
  buffer: Buffer.from('héllo'),
  map: new Map<unknown, unknown>([
    ['a', 1],
    [2, new Date(0)],
  ]),
  set: new Set(['x', 3n]),
  nothing: undefined,
  numbers: [NaN, -0, Infinity, -Infinity, 1.5],
  pattern: /ab+c/gi,
  url: new URL('https://example.com/pay?id=1'),
  nested: { list: [{ when: new Date(1), n: null }], text: 'nul \u0000 and ☃ and \ud83d\ude00' },
});

const stall = () => new Promise<never>(() => undefined);

describe('step results across a resume', () => {
  let db: TestSchema;
  let clock: ManualClock;
  let idem: Idem;
  const lease = 1000;

  beforeAll(async () => {
    db = await createTestSchema();
    await db.pool.query(`CREATE TABLE "${db.schema}".effects (id serial PRIMARY KEY, key text NOT NULL)`);
    clock = new ManualClock(Date.now());
    idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: lease, waitMs: 0 });
  });
  afterAll(async () => {
    await db.close();
  });

  const newKey = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;
  const spec = (key: string) => ({ tenant: 'acme', operation: 'typed', key, request: { key } });
  const stored = async (key: string) =>
    (
      await db.pool.query<{ step: string; result: string | null; result_meta: string | null }>(
        `SELECT step, result, result_meta FROM "${db.schema}".steps WHERE idempotency_key = $1 ORDER BY step`,
        [key],
      )
    ).rows;

  it('a step and a call return the same values, with the same types, on the first run and on a resume', async () => {
    const key = newKey('resume');
    const firstRun: Record<string, unknown> = {};
    let reached!: () => void;
    const stalled = new Promise<void>((resolve) => (reached = resolve));
    // The first holder records both, then dies (stalls for good) before completing.
    void idem.steps(spec(key), async (op) => {
      firstRun.step = await op.step('load', async () => typed());
      firstRun.call = await op.call('charge', async () => typed());
      firstRun.void = await op.step('note', async () => undefined);
      reached();
      return stall();
    });
    await stalled;
    expect(firstRun.step).toStrictEqual(typed());
    expect(firstRun.call).toStrictEqual(typed());

    clock.advance(lease + 1);
    const resumed: Record<string, unknown> = {};
    const never = async (): Promise<never> => {
      throw new Error('a recorded step ran again');
    };
    const done = await idem.steps(spec(key), async (op: MultiStepOperation) => {
      expect(op.resumed).toBe(true);
      resumed.step = await op.step('load', never);
      resumed.call = await op.call('charge', never);
      resumed.void = await op.step('note', never);
      return 'done';
    });
    expect(done.value).toBe('done');
    expect(resumed.step).toStrictEqual(firstRun.step);
    expect(resumed.call).toStrictEqual(firstRun.call);
    expect(isDeepStrictEqual(resumed.step, firstRun.step)).toBe(true);
    expect(isDeepStrictEqual(resumed.call, firstRun.call)).toBe(true);
    expect(resumed.void).toBeUndefined();
    const value = resumed.step as ReturnType<typeof typed>;
    expect(value.at).toBeInstanceOf(Date);
    expect(typeof value.big).toBe('bigint');
    expect(Buffer.isBuffer(value.buffer)).toBe(true);
    expect(Buffer.isBuffer(value.bytes)).toBe(false);
    expect(value.bytes).toBeInstanceOf(Uint8Array);
    expect(value.map.get(2)).toBeInstanceOf(Date);
    expect(Object.is(value.numbers[1], -0)).toBe(true);
    expect('nothing' in value).toBe(true);

    // What operators read stays plain JSON: ISO dates, decimal bigints, base64 bytes.
    const rows = await stored(key);
    expect(rows.map((r) => r.step)).toEqual(['charge', 'load', 'note']);
    const load = rows.find((r) => r.step === 'load')!;
    expect(JSON.parse(load.result!)).toMatchObject({
      at: '2026-03-01T10:00:00.123Z',
      big: '1180591620717411303424',
      bytes: 'AAF//w==',
      set: ['x', '3'],
      nothing: null,
    });
    expect(load.result_meta).toContain('"Date"');
    expect(rows.find((r) => r.step === 'note')).toMatchObject({ result: 'null' });
  });

  it('plain JSON results are stored as JSON.stringify gives them, with no type annotations', async () => {
    const key = newKey('plain');
    const value = { id: 'pay_1', amount: 1999, tags: ['a', 'b'], nested: { ok: true, none: null } };
    await idem.steps(spec(key), async (op) => {
      await op.step('plain', async () => value);
      await op.call('quote', async () => 'q-1');
      return 'ok';
    });
    expect(await stored(key)).toEqual([
      { step: 'plain', result: JSON.stringify(value), result_meta: null },
      { step: 'quote', result: '"q-1"', result_meta: null },
    ]);
  });

  it('a step returning a function fails with InvalidArgumentError naming it, before its transaction commits', async () => {
    const key = newKey('function');
    const error = await idem
      .steps(spec(key), async (op) => {
        await op.step('price', async (tx) => {
          await tx.query(`INSERT INTO "${db.schema}".effects (key) VALUES ($1)`, [key]);
          return { amount: 5, format: () => '5.00' };
        });
        return 'never';
      })
      .catch((e: unknown) => e);
    expect(isIdemError(error) && error.code).toBe('IDEM_INVALID_ARGUMENT');
    expect((error as Error).message).toMatch(
      /^step "price" returned a function \(format\) at result\.format/,
    );
    // Nothing is stored: not the step's write, not its result; the key is free (nothing committed).
    const effects = await db.pool.query(`SELECT 1 FROM "${db.schema}".effects WHERE key = $1`, [key]);
    expect(effects.rowCount).toBe(0);
    expect(await stored(key)).toEqual([]);
    expect(await idem.get(spec(key))).toBeNull();
  });

  it("a call's result that would not resume as itself fails the operation for good, naming the call", async () => {
    class Money {
      constructor(readonly cents: number) {}
      format() {
        return (this.cents / 100).toFixed(2);
      }
    }
    const key = newKey('instance');
    const error = await idem
      .steps(spec(key), async (op) => {
        await op.call('quote', async () => ({ total: new Money(500) }));
        return 'never';
      })
      .catch((e: unknown) => e);
    // The call may have had its effect (its start was committed): the failure is stored, never
    // a result that a resume would get back as a plain { cents: 500 }.
    expect(isStepFailed(error)).toBe(true);
    const cause = (error as Error).cause;
    expect(isIdemError(cause) && cause.code).toBe('IDEM_INVALID_ARGUMENT');
    expect((cause as Error).message).toMatch(
      /^call "quote" returned an instance of Money .* at result\.total/,
    );
    expect(await stored(key)).toEqual([{ step: 'quote', result: null, result_meta: null }]);
  });

  it('refuses what superjson would store as something else, with the path', () => {
    const refused: [unknown, RegExp][] = [
      [{ s: Symbol('s') }, /a symbol \(Symbol\(s\)\) at result\.s/],
      // eslint-disable-next-line no-sparse-arrays -- the hole is the point
      [[1, , 3], /a sparse array \(a hole\) at result\[1\]/],
      [{ when: new Date(NaN) }, /an invalid Date at result\.when/],
      [{ error: new TypeError('x') }, /an Error \(TypeError; .*\) at result\.error/],
      [new Map([['k', { fn() {} }]]), /a function \(fn\) at result\.get\("k"\)\.fn/],
      [{ 'odd key': new (class Point {})() }, /an instance of Point .* at result\["odd key"\]/],
      [{ [Symbol('k')]: 1 }, /a symbol-keyed property at result/],
      [{ constructor: 'x', at: new Date(0) }, /Detected property constructor/],
    ];
    for (const [value, message] of refused) {
      expect(() => encodeResult(value, 'step "x"'), String(message)).toThrow(message);
    }
    // A key superjson refuses is fine in a plain JSON result (superjson is not used for those).
    expect(encodeResult({ constructor: 'x' }, 'step "x"')).toEqual({
      json: '{"constructor":"x"}',
      meta: null,
    });
    // A null-prototype object (Object.create(null), Object.groupBy) is kept as an ordinary object
    // with the same properties: the one documented difference.
    const dictionary = Object.assign(Object.create(null) as object, { a: new Date(0) });
    const back = decodeResult(...(Object.values(encodeResult(dictionary, 'step "x"')) as [string, string]));
    expect(back).toEqual({ a: new Date(0) });
    expect(Object.getPrototypeOf(back)).toBe(Object.prototype);
    // Cycles and shared references survive.
    const cyclic: Record<string, unknown> = { n: 1 };
    cyclic.self = cyclic;
    expect(encodeResult(cyclic, 'step "x"')).toEqual({
      json: '{"n":1,"self":null}',
      meta: '{"referentialEqualities":[["self"]],"v":1}',
    });
  });

  it('a cyclic result resumes as a cycle', async () => {
    const key = newKey('cycle');
    const body = (crash: boolean) => async (op: MultiStepOperation) => {
      const graph = await op.step('graph', async () => {
        const node: Record<string, unknown> = { at: new Date(5) };
        node.self = node;
        return node;
      });
      if (crash) throw Object.assign(new Error('crash'), { retryable: true });
      return graph.self === graph && graph.at instanceof Date;
    };
    await expect(idem.steps(spec(key), body(true))).rejects.toMatchObject({ retryable: true });
    expect((await idem.steps(spec(key), body(false))).value).toBe(true);
  });

  it('property: generated values (dates, bigints, bytes, maps, sets, unicode and NUL strings) round-trip through the table', async () => {
    // A NUL cannot be stored in a text column (22021), but none reaches it: JSON escapes every
    // control character (`"\u0000"`), so strings with NULs, and lone surrogates, round-trip.
    const key = fc.string({ unit: 'binary', maxLength: 6 }).filter(
      (k) => k !== '__proto__' && k !== 'constructor' && k !== 'prototype', // superjson refuses them beside typed values
    );
    const { value } = fc.letrec<{ value: unknown }>((tie) => ({
      value: fc.oneof(
        { depthSize: 'small', withCrossShrink: true },
        fc.string({ unit: 'binary', maxLength: 12 }),
        fc.string({ unit: 'grapheme', maxLength: 6 }),
        fc.constantFrom('', '\u0000', 'a\u0000b', '\ud800', '\u2028'),
        fc.integer(),
        fc.double(), // NaN, ±Infinity, -0 included
        fc.bigInt(),
        fc.date({ noInvalidDate: true }),
        fc.boolean(),
        fc.constant(null),
        fc.constant(undefined),
        fc.uint8Array({ maxLength: 8 }),
        fc.uint8Array({ maxLength: 8 }).map((b) => Buffer.from(b)),
        fc.array(tie('value'), { maxLength: 4 }),
        // Null-prototype objects come back as ordinary ones (documented; see the test above).
        fc.dictionary(key, tie('value'), { maxKeys: 4, noNullPrototype: true }),
        fc.array(fc.tuple(tie('value'), tie('value')), { maxLength: 3 }).map((entries) => new Map(entries)),
        fc.array(tie('value'), { maxLength: 3 }).map((items) => new Set(items)),
      ),
    }));
    let n = 0;
    await fc.assert(
      fc.asyncProperty(value, async (generated) => {
        const k = `prop-${++n}-${randomBytes(3).toString('hex')}`;
        const body = (crash: boolean) => async (op: MultiStepOperation) => {
          const got = await op.step('value', async () => generated);
          if (crash) throw Object.assign(new Error('crash after the step'), { retryable: true });
          return got;
        };
        const first = await idem.steps(spec(k), body(true)).catch((e: unknown) => e);
        if (!(isIdemError(first) && first.retryable)) throw first;
        let resumed: unknown;
        await idem.steps(spec(k), async (op) => {
          if (!op.resumed) throw new Error('not a resume');
          resumed = await op.step('value', async () => {
            throw new Error('ran again');
          });
          return 'ok';
        });
        expect(isDeepStrictEqual(resumed, generated)).toBe(true);
        const [row] = await stored(k);
        expect(() => JSON.parse(row!.result!) as unknown).not.toThrow(); // always plain JSON text
        if (row!.result_meta === null) expect(row!.result).toBe(JSON.stringify(generated));
      }),
      { numRuns: 80 },
    );
  });
});

describe('rows written before migration 0009', () => {
  const old = schemaBefore(9);
  const { schema, s } = old;

  it('resume as before: plain JSON, a date as its ISO string, a void step as null', async () => {
    const now = Date.now();
    const scope = ['acme', 'legacy', 'k-old'];
    // Written by the code before 0009 (its statements' shapes): a pending operation whose holder
    // died after a step, a void step and a call.
    await old.pool.query(
      `INSERT INTO ${s}.requests (tenant_id, operation, idempotency_key, fingerprint, state, fence,
         locked_until, recovery_point, created_at, expires_at, tombstone_until)
       VALUES ($1, $2, $3, 'fp-old', 'pending', 1, $4, 'charge', $4, $5, $5)`,
      [...scope, new Date(now - 60_000), new Date(now + 86_400_000)],
    );
    const step = `INSERT INTO ${s}.steps (tenant_id, operation, idempotency_key, step, kind, result, fence,
        started_at, completed_at) VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $7)`;
    await old.pool.query(step, [
      ...scope,
      'load',
      'local',
      '{"at":"2026-01-01T00:00:00.000Z","n":1}',
      new Date(now),
    ]);
    await old.pool.query(step, [...scope, 'note', 'local', 'null', new Date(now)]);
    await old.pool.query(step, [...scope, 'charge', 'call', '"ch_1"', new Date(now)]);

    expect((await migrate(fromPg(old.pool), { schema })).applied).toContain('0009_typed_results');

    const idem = createIdem({ sql: fromPg(old.pool), schema });
    const seen: unknown[] = [];
    const never = async (): Promise<never> => {
      throw new Error('a recorded step ran again');
    };
    const result = await idem.steps(
      { tenant: 'acme', operation: 'legacy', key: 'k-old', request: null, fingerprint: 'fp-old' },
      async (op) => {
        expect(op.resumed).toBe(true);
        seen.push(await op.step('load', never), await op.step('note', never), await op.call('charge', never));
        // New steps of the same operation keep their types.
        seen.push(await op.step('after', async () => ({ at: new Date(7), big: 1n })));
        return 'finished';
      },
    );
    expect(result.value).toBe('finished');
    expect(seen).toStrictEqual([
      { at: '2026-01-01T00:00:00.000Z', n: 1 },
      null,
      'ch_1',
      { at: new Date(7), big: 1n },
    ]);
    const { rows } = await old.pool.query(
      `SELECT step, result, result_meta FROM ${s}.steps WHERE idempotency_key = 'k-old' ORDER BY step`,
    );
    expect(
      rows.map((r: { step: string; result_meta: string | null }) => [r.step, r.result_meta !== null]),
    ).toEqual([
      ['after', true],
      ['charge', false],
      ['load', false],
      ['note', false],
    ]);
  });
});
