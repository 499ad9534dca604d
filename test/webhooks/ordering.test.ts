/**
 * The two ordering models on a real PostgreSQL, through the real receiver:
 * - state (latest wins): the same entity and version under a new delivery id is handled once; an
 *   older version after a newer one is superseded and leaves the newer state;
 * - sequence (every version, in order): versions are handled strictly in order whatever the
 *   arrival order; a gap waits, parks after its timeout (visible in `parked()`, the console API
 *   and the Prometheus gauge), resumes when the gap is filled or skipped; a far-ahead version is a
 *   gap, not the new truth;
 * - validation: invalid events are dead letters with the reason and change nothing;
 * - one entity is handled by one worker at a time while other entities proceed in parallel;
 * - a property: any interleaving and duplication of a random history, across 4 workers in 2
 *   processor instances, ends in the state of applying it once in order, for both models.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fromPg, type PgClientLike } from '../../src/adapters/pg.js';
import { ManualClock, systemClock, type Clock } from '../../src/core/clock.js';
import type { Transaction } from '../../src/core/sql.js';
import { consoleDatabase } from '../../src/console/database.js';
import { readWebhooks } from '../../src/console/views/webhooks.js';
import { createIdemMetrics } from '../../src/observability/prometheus.js';
import {
  createWebhookReceiver,
  InvalidWebhookEventError,
  recordHeaders,
  createStandardWebhooksVerifier,
  type WebhookEvent,
  type WebhookHandler,
  type WebhookHandlers,
  type WebhookProcessor,
  type WebhookProcessorOptions,
  type WebhookReceiver,
} from '../../src/webhooks/index.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { capturingEvents, count, signStandard, standardSecret, testProcessor } from './support.js';

const minute = 60_000;
let db: TestSchema;
let clock: ManualClock;
let receiver: WebhookReceiver;
let sequence = 0;

/** An event of the tests: a state snapshot (`status`) or a change (`delta`) of an account. */
interface AccountEvent {
  type: string;
  data: { account: string; version: number; status?: string; delta?: number };
}

function makeReceiver(at: Clock): WebhookReceiver {
  return createWebhookReceiver({
    sql: fromPg(db.pool),
    schema: db.schema,
    clock: at,
    sources: { billing: createStandardWebhooksVerifier({ secrets: [standardSecret] }) },
  });
}

/** Stores a delivery through the receiver (202 new, 200 duplicate id); returns its delivery id. */
async function store(
  event: AccountEvent | Record<string, unknown>,
  id = `msg_${++sequence}`,
  into = receiver,
  at: Clock = clock,
): Promise<string> {
  const signed = signStandard({ id, body: JSON.stringify(event), timestampMs: at.now() });
  const answer = await into.receive('billing', { headers: recordHeaders(signed.headers), body: signed.body });
  expect(answer.status).toBeLessThan(300);
  return id;
}

const q = (text: string, params: unknown[] = []) =>
  db.pool.query(text.replaceAll('$schema', `"${db.schema}"`), params);

function processor(
  handlers: WebhookHandlers<PgClientLike>,
  options: Partial<WebhookProcessorOptions<PgClientLike>> = {},
): WebhookProcessor<PgClientLike> {
  return testProcessor(db, clock, handlers, options);
}

const accountEntity = (event: WebhookEvent) => {
  const { data } = event.json<AccountEvent>();
  return { key: data.account, version: data.version };
};

/** State: writes the status and keeps every applied version in `history`. */
const stateHandler: WebhookHandler<PgClientLike> = {
  ordering: 'state',
  entity: accountEntity,
  async handle(tx, event) {
    const { data } = event.json<AccountEvent>();
    await tx.query(
      `INSERT INTO "${db.schema}".accounts (id, status, balance) VALUES ($1, $2, 0)
       ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status`,
      [data.account, data.status],
    );
    await record(tx, data.account, data.version, event.deliveryId);
  },
};

/** Sequence: adds the delta to the balance, refusing a balance below zero. */
const sequenceHandler: WebhookHandler<PgClientLike> = {
  ordering: 'sequence',
  entity: accountEntity,
  validate(event) {
    const { data } = event.json<AccountEvent>();
    return Number.isSafeInteger(data.delta) ? undefined : 'delta must be an integer';
  },
  async handle(tx, event) {
    const { data } = event.json<AccountEvent>();
    const { rows } = await tx.query<{ balance: string }>(
      `INSERT INTO "${db.schema}".accounts (id, status, balance) VALUES ($1, 'open', $2)
       ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + EXCLUDED.balance RETURNING balance`,
      [data.account, data.delta],
    );
    if (Number(rows[0]!.balance) < 0) {
      throw new InvalidWebhookEventError(`the balance of ${data.account} would go below zero`);
    }
    await record(tx, data.account, data.version, event.deliveryId);
  },
};

async function record(tx: Transaction<PgClientLike>, account: string, version: number, deliveryId: string) {
  await tx.query(`INSERT INTO "${db.schema}".history (account, version, delivery_id) VALUES ($1, $2, $3)`, [
    account,
    version,
    deliveryId,
  ]);
}

const handlers: WebhookHandlers<PgClientLike> = {
  billing: { 'account.updated': stateHandler, 'account.changed': sequenceHandler },
};

const history = async (account: string) =>
  (await q(`SELECT version FROM $schema.history WHERE account = $1 ORDER BY n`, [account])).rows.map(
    (r: { version: number }) => r.version,
  );
const account = async (id: string) =>
  (await q(`SELECT status, balance::int AS balance FROM $schema.accounts WHERE id = $1`, [id])).rows[0] as
    { status: string; balance: number } | undefined;
const change = (account: string, version: number, delta: number): AccountEvent => ({
  type: 'account.changed',
  data: { account, version, delta },
});
const snapshot = (account: string, version: number, status = `s${version}`): AccountEvent => ({
  type: 'account.updated',
  data: { account, version, status },
});

beforeAll(async () => {
  db = await createTestSchema({ poolSize: 24 });
  await q(
    `CREATE TABLE $schema.accounts (id text PRIMARY KEY, status text NOT NULL, balance bigint NOT NULL)`,
  );
  await q(
    `CREATE TABLE $schema.history (n bigserial PRIMARY KEY, account text NOT NULL, version integer NOT NULL, delivery_id text NOT NULL)`,
  );
});

afterAll(async () => {
  await db?.close();
});

beforeEach(async () => {
  clock = new ManualClock(Date.UTC(2030, 0, 1, 12));
  receiver = makeReceiver(clock);
  await q(`DELETE FROM $schema.webhook_receipts`);
});

describe('state: latest wins', () => {
  it('the same entity and version under a new delivery id is handled once (a duplicate)', async () => {
    const worker = processor(handlers);
    await store(snapshot('dup', 1, 'first'), 'msg_dup_a');
    await store(snapshot('dup', 1, 'first'), 'msg_dup_b'); // the sender re-sent it under a new id
    await store(snapshot('dup', 1, 'first'), 'msg_dup_a'); // and the first id again: 200, not stored
    expect(await worker.drain({ limit: 1 })).toEqual(['applied', 'duplicate']);
    expect(await history('dup')).toEqual([1]);
    const [duplicate] = await worker.listReceipts({ states: ['duplicate'] });
    expect(duplicate).toMatchObject({ deliveryId: 'msg_dup_b', entityKey: 'dup', entityVersion: '1' });
  });

  it('a version-2 state followed by a late version 1 leaves version 2’s state', async () => {
    const worker = processor(handlers);
    await store(snapshot('late', 2, 'closed'));
    expect(await worker.drain()).toEqual(['applied']);
    await store(snapshot('late', 1, 'open'));
    expect(await worker.drain()).toEqual(['superseded']);
    expect(await account('late')).toMatchObject({ status: 'closed' });
    expect(await history('late')).toEqual([2]);
  });
});

describe('sequence: every version, in order', () => {
  it('handles versions in order whatever the arrival order, each once', async () => {
    const worker = processor(handlers);
    await store(change('seq', 3, 300));
    await store(change('seq', 1, 100));
    await store(change('seq', 2, 200));
    await store(change('seq', 2, 200)); // the same change under another delivery id
    const outcomes = await worker.drain({ limit: 1 });
    expect(outcomes.filter((o) => o === 'applied')).toHaveLength(3);
    expect(outcomes.filter((o) => o === 'duplicate')).toHaveLength(1);
    expect(await history('seq')).toEqual([1, 2, 3]);
    expect(await account('seq')).toMatchObject({ balance: 600 });
  });

  it('a gap waits, parks after the timeout (parked(), console API, metric), and resumes when filled', async () => {
    const worker = processor(handlers, { gapTimeoutMs: 10 * minute });
    const metrics = createIdemMetrics({ sql: fromPg(db.pool), schema: db.schema });
    const parkedGauge = async () =>
      Number(/^idem_webhook_entities_parked (\d+)$/m.exec(await metrics.render())?.[1]);
    const console = consoleDatabase({ pool: db.pool, schema: db.schema }, clock, 5000);

    await store(change('gap', 1, 10));
    expect(await worker.drain()).toEqual(['applied']);
    const third = await store(change('gap', 3, 30));
    // Received a moment later, so 4 is claimed after 3 once both are woken (due at the same time).
    clock.advance(1);
    await store(change('gap', 4, 40));
    expect((await worker.drain({ limit: 1 })).sort()).toEqual(['waiting', 'waiting']);
    expect(await history('gap')).toEqual([1]);
    const [waiting] = await worker.listReceipts({ states: ['waiting'] });
    expect(waiting).toMatchObject({ deliveryId: third, entityVersion: '3', attempts: 0, deferrals: 1 });
    expect(waiting!.nextAttemptAt!).toBe(clock.now() + 10 * minute);
    expect(await worker.listParked()).toEqual([]);

    clock.advance(10 * minute - 1);
    expect(await worker.drain()).toEqual([]);
    clock.advance(1);
    // One at a time: claimed together, the second would find the entity busy and wait a moment.
    expect(await worker.drain({ limit: 1 })).toEqual(['parked', 'parked']);
    const [parked] = await worker.listParked();
    expect(parked).toMatchObject({
      scope: 'billing',
      key: 'gap',
      appliedVersion: '1',
      missingVersion: '2',
      waiting: 2,
      lowestWaitingVersion: '3',
    });
    expect(parked!.reason).toMatch(/version 2 has not arrived/);
    expect((await worker.listReceipts({ states: ['waiting'] })).map((r) => r.nextAttemptAt)).toEqual([
      null,
      null,
    ]);
    // Parked receipts are not polled: nothing is due however long it waits.
    clock.advance(24 * 60 * minute);
    expect(await worker.drain()).toEqual([]);
    expect(await parkedGauge()).toBe(1);
    const view = await readWebhooks(console, {});
    expect(view.parked).toEqual([
      expect.objectContaining({ scope: 'billing', key: 'gap', missingVersion: '2', waiting: 2 }),
    ]);
    expect(view.sources[0]!.counts).toMatchObject({ applied: 1, waiting: 2 });

    // The missing version arrives: it applies, the entity unparks, 3 and 4 follow in order. One at a
    // time: claimed together, 3 and 4 would race for the entity's lock and one would wait a moment.
    await store(change('gap', 2, 20));
    expect(await worker.drain({ limit: 1 })).toEqual(['applied', 'applied', 'applied']);
    expect(await history('gap')).toEqual([1, 2, 3, 4]);
    expect(await account('gap')).toMatchObject({ balance: 100 });
    expect(await worker.listParked()).toEqual([]);
    await new Promise((r) => setTimeout(r, 150)); // one scrape's snapshot is shared for 100 ms
    expect(await parkedGauge()).toBe(0);
    expect((await readWebhooks(console, {})).parked).toEqual([]);
  });

  it('an operator skip resumes a parked entity; the skipped version arriving later is a dead letter that says so', async () => {
    const captured = capturingEvents();
    const worker = processor(handlers, { gapTimeoutMs: minute, events: captured.events });
    await store(change('skip', 1, 1));
    const four = await store(change('skip', 4, 4));
    await worker.drain({ limit: 1 });
    clock.advance(minute);
    expect(await worker.drain()).toEqual(['parked']);
    expect(await history('skip')).toEqual([1]);
    const receipt = { tenant: '', source: 'billing', eventType: 'account.changed' };
    expect(captured.kept.map((k) => [k.name, 'outcome' in k.event ? k.event.outcome : undefined])).toEqual([
      ['webhook:processed', 'applied'],
      ['webhook:processed', 'waiting'],
      ['webhook:parked', undefined],
    ]);
    expect(captured.of('webhook:parked')).toEqual([
      {
        ...receipt,
        deliveryId: four,
        attempt: 1,
        entity: { scope: 'billing', key: 'skip', version: '4' },
        expected: '2',
        reason: expect.stringMatching(/version 2 has not arrived/) as unknown,
      },
    ]);

    const result = await worker.skip({ scope: 'billing', key: 'skip', reason: 'provider lost 2 and 3' });
    expect(result).toEqual({ from: '2', through: '3', woken: 1 });
    expect(captured.of('webhook:gap-skipped')).toEqual([
      { tenant: '', scope: 'billing', key: 'skip', from: '2', through: '3', reason: 'provider lost 2 and 3' },
    ]);
    expect(await worker.drain()).toEqual(['applied']);
    expect(await history('skip')).toEqual([1, 4]);
    expect(await worker.listParked()).toEqual([]);

    await store(change('skip', 3, 3));
    expect(await worker.drain()).toEqual(['invalid']);
    const [dead] = await worker.listReceipts({ states: ['dead'] });
    expect(dead!.lastError).toMatch(
      /version 3 of billing\/skip arrived after an operator skipped versions 2–3/,
    );
    expect(captured.of('webhook:dead')).toEqual([
      expect.objectContaining({ ...receipt, error: dead!.lastError, invalid: true }),
    ]);
    expect(dead!.lastError).toMatch(/provider lost 2 and 3/);
    expect(await history('skip')).toEqual([1, 4]);
    await expect(worker.skip({ scope: 'billing', key: 'skip' })).rejects.toThrow(/nothing waits/);
    await expect(worker.skip({ scope: 'billing', key: 'nope', through: 3 })).rejects.toThrow(
      /no webhook entity/,
    );
  });

  it('a version far ahead is a gap, not the new truth: the real next versions still apply', async () => {
    const worker = processor(handlers, { gapTimeoutMs: minute });
    await store(change('ahead', 1_000_000_000_000_000, 5));
    expect(await worker.drain()).toEqual(['waiting']);
    await store(change('ahead', 1, 1));
    await store(change('ahead', 2, 2));
    await worker.drain({ limit: 1 });
    expect(await history('ahead')).toEqual([1, 2]);
    expect(await account('ahead')).toMatchObject({ balance: 3 });
  });

  it('the first version is 1 unless the handler says otherwise', async () => {
    const worker = processor({
      billing: { 'account.changed': { ...sequenceHandler, firstVersion: 100 } },
    });
    await store(change('first', 101, 1));
    expect(await worker.drain()).toEqual(['waiting']);
    await store(change('first', 100, 1));
    await worker.drain();
    expect(await history('first')).toEqual([100, 101]);
    // Below the first version of an entity that has none applied: refused, not a silent duplicate.
    await store(change('first-low', 7, 1));
    expect(await worker.drain()).toEqual(['invalid']);
    const [dead] = await worker.listReceipts({ states: ['dead'] });
    expect(dead!.lastError).toMatch(
      /version 7 of billing\/first-low is below the handler's first version 100/,
    );
  });

  it('a failing version holds the later ones back until it succeeds; nothing is skipped', async () => {
    let failures = 2;
    const worker = processor(
      {
        billing: {
          'account.changed': {
            ...sequenceHandler,
            async handle(tx, event) {
              if (event.json<AccountEvent>().data.version === 1 && failures-- > 0)
                throw new Error('busy downstream');
              await sequenceHandler.handle(tx, event);
            },
          },
        },
      },
      { backoff: { baseMs: 1000, jitter: 0 } },
    );
    await store(change('hold', 1, 1));
    await store(change('hold', 2, 2));
    for (let i = 0; i < 5; i++) {
      await worker.drain();
      clock.advance(5000);
    }
    expect(await history('hold')).toEqual([1, 2]);
    const [applied] = (await worker.listReceipts({ states: ['applied'] })).filter(
      (r) => r.entityVersion === '1',
    );
    expect(applied!.attempts).toBe(3);
  });
});

describe('validation before an event takes effect', () => {
  it('refused by validate(): dead at once with the reason; no effect, the entity untouched, never retried', async () => {
    const worker = processor(handlers);
    await store({ type: 'account.changed', data: { account: 'val', version: 1, delta: 'lots' } });
    expect(await worker.drain()).toEqual(['invalid']);
    const [dead] = await worker.listReceipts({ states: ['dead'] });
    expect(dead).toMatchObject({
      entityKey: 'val',
      entityVersion: '1',
      lastError: 'invalid event: delta must be an integer',
    });
    clock.advance(24 * 60 * minute);
    expect(await worker.drain()).toEqual([]);
    expect(await account('val')).toBeUndefined();
    // Version 1 is still the next one: the genuine event applies.
    await store(change('val', 1, 5));
    expect(await worker.drain()).toEqual(['applied']);
    expect(await account('val')).toMatchObject({ balance: 5 });
  });

  it('refused inside the handler (InvalidWebhookEventError): its writes roll back, dead with the reason', async () => {
    const worker = processor(handlers);
    await store(change('neg', 1, 10));
    await store(change('neg', 2, -50));
    expect(await worker.drain({ limit: 1 })).toEqual(['applied', 'invalid']);
    expect(await account('neg')).toMatchObject({ balance: 10 });
    expect(await history('neg')).toEqual([1]);
    const [dead] = await worker.listReceipts({ states: ['dead'] });
    expect(dead!.lastError).toBe('invalid event: the balance of neg would go below zero');
    expect(dead!.attempts).toBe(1);
  });

  it('an event whose entity cannot be read, or whose sequence version is not an integer, is invalid', async () => {
    const worker = processor(handlers);
    await store({ type: 'account.changed', data: {} });
    await store({ type: 'account.changed', data: { account: 'frac', version: 1.5, delta: 1 } });
    expect(await worker.drain()).toEqual(['invalid', 'invalid']);
    const errors = (await worker.listReceipts({ states: ['dead'] })).map((r) => r.lastError).sort();
    expect(errors[0]).toMatch(
      /^invalid event: a sequence version must be a non-negative integer \(got 1.5\)/,
    );
    expect(errors[1]).toMatch(/^invalid event: an entity key must be a non-empty string/);
  });

  it('an event type whose model differs from the one its entity was first seen under is refused', async () => {
    const worker = processor(handlers);
    await store(change('mixed', 1, 1));
    await store(snapshot('mixed', 2));
    expect(await worker.drain({ limit: 1 })).toEqual(['applied', 'invalid']);
    const [dead] = await worker.listReceipts({ states: ['dead'] });
    expect(dead!.lastError).toMatch(/ordered by sequence; this event type declares state/);
  });

  it('handler options are checked when the processor is made', () => {
    expect(() =>
      processor({ billing: { x: { ordering: 'sequence', handle: async () => undefined } } }),
    ).toThrow(/needs an entity/);
    expect(() => processor({ billing: { x: { ...sequenceHandler, firstVersion: -1 } } })).toThrow(
      /firstVersion/,
    );
  });
});

describe('per-entity serialisation', () => {
  it('one entity is never handled by two workers at once; other entities proceed meanwhile', async () => {
    const inFlight = new Map<string, number>();
    let maxPerEntity = 0;
    let maxOverall = 0;
    let overall = 0;
    const slow: WebhookHandler<PgClientLike> = {
      ...sequenceHandler,
      async handle(tx, event) {
        const key = event.json<AccountEvent>().data.account;
        inFlight.set(key, (inFlight.get(key) ?? 0) + 1);
        overall++;
        maxPerEntity = Math.max(maxPerEntity, inFlight.get(key)!);
        maxOverall = Math.max(maxOverall, overall);
        await new Promise((r) => setTimeout(r, 30));
        inFlight.set(key, inFlight.get(key)! - 1);
        overall--;
        await sequenceHandler.handle(tx, event);
      },
    };
    const wall = systemClock;
    const live = makeReceiver(wall);
    const options = { clock: wall, concurrency: 4, pollIntervalMs: 20, entityBusyRetryMs: 40 };
    const workers = [
      processor({ billing: { 'account.changed': slow } }, options),
      processor({ billing: { 'account.changed': slow } }, options),
    ];
    for (const key of ['par-a', 'par-b', 'par-c']) {
      for (let v = 1; v <= 6; v++) await store(change(key, v, v), undefined, live, wall);
    }
    await Promise.all(workers.map((w) => w.start()));
    await until(async () => (await count(db.pool, db.schema, 'history', `account LIKE 'par-%'`)) === 18);
    await Promise.all(workers.map((w) => w.stop()));
    expect(maxPerEntity).toBe(1);
    expect(maxOverall).toBeGreaterThan(1);
    for (const key of ['par-a', 'par-b', 'par-c']) expect(await history(key)).toEqual([1, 2, 3, 4, 5, 6]);
  });
});

describe('property: any interleaving and duplication ends as if applied once in order', () => {
  /** A history: per account, versions 1..n, each with a delta and a status. */
  const histories = fc.array(
    fc.record({
      versions: fc.array(
        fc.record({ delta: fc.integer({ min: 1, max: 1000 }), status: fc.constantFrom('a', 'b', 'c') }),
        {
          minLength: 1,
          maxLength: 6,
        },
      ),
      // How each version is delivered: 1–3 times, each either again under the same id or under a new one.
      copies: fc.array(fc.tuple(fc.integer({ min: 0, max: 2 }), fc.boolean()), {
        minLength: 6,
        maxLength: 6,
      }),
    }),
    { minLength: 1, maxLength: 4 },
  );

  for (const model of ['state', 'sequence'] as const) {
    it(`${model}: 4 workers in 2 processor instances`, async () => {
      const wall = systemClock;
      const live = makeReceiver(wall);
      let run = 0;
      await fc.assert(
        fc.asyncProperty(
          histories,
          fc.infiniteStream(fc.double({ min: 0, max: 1, noNaN: true })),
          async (accounts, randoms) => {
            run++;
            const prefix = `${model}-${run}-${sequence}`;
            const deliveries: { id: string; event: AccountEvent }[] = [];
            accounts.forEach((acct, a) => {
              const key = `${prefix}-${a}`;
              acct.versions.forEach((v, i) => {
                const version = i + 1;
                const event: AccountEvent =
                  model === 'state' ? snapshot(key, version, v.status) : change(key, version, v.delta);
                const id = `msg_${prefix}_${a}_${version}`;
                deliveries.push({ id, event });
                const [extra, sameId] = acct.copies[i]!;
                for (let c = 0; c < extra; c++)
                  deliveries.push({ id: sameId ? id : `${id}_copy${c}`, event });
              });
            });
            // Arrival order: shuffled by the generated randoms.
            const order = deliveries
              .map((d) => ({ d, r: randoms.next().value as number }))
              .sort((x, y) => x.r - y.r);
            const options = {
              clock: wall,
              concurrency: 2,
              pollIntervalMs: 10,
              entityBusyRetryMs: 20,
              gapTimeoutMs: 60_000,
            };
            const workers = [processor(handlers, options), processor(handlers, options)];
            await Promise.all(workers.map((w) => w.start()));
            // Deliveries arrive while the workers run, a few at a time.
            for (let i = 0; i < order.length; i += 3) {
              await Promise.all(order.slice(i, i + 3).map(({ d }) => store(d.event, d.id, live, wall)));
              for (const w of workers) w.notify();
            }
            await until(
              async () =>
                (await count(
                  db.pool,
                  db.schema,
                  'webhook_receipts',
                  `state IN ('pending', 'processing', 'waiting') AND delivery_id LIKE 'msg_${prefix}_%'`,
                )) === 0,
            );
            await Promise.all(workers.map((w) => w.stop()));
            for (const [a, acct] of accounts.entries()) {
              const key = `${prefix}-${a}`;
              const applied = await history(key);
              const row = await account(key);
              if (model === 'sequence') {
                expect(applied).toEqual(acct.versions.map((_, i) => i + 1));
                expect(row!.balance).toBe(acct.versions.reduce((sum, v) => sum + v.delta, 0));
              } else {
                // Latest wins: the highest version's state, never moved backwards, each version at most once.
                expect(row!.status).toBe(acct.versions.at(-1)!.status);
                expect(applied.at(-1)).toBe(acct.versions.length);
                for (let i = 1; i < applied.length; i++) expect(applied[i]!).toBeGreaterThan(applied[i - 1]!);
              }
            }
            expect(
              await count(
                db.pool,
                db.schema,
                'webhook_receipts',
                `state = 'dead' AND delivery_id LIKE 'msg_${prefix}_%'`,
              ),
            ).toBe(0);
          },
        ),
        { numRuns: 12, seed: model === 'state' ? 11 : 12 },
      );
    }, 120_000);
  }
});

async function until(condition: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('timed out waiting for the workers');
    await new Promise((r) => setTimeout(r, 20));
  }
}
