/**
 * Processing after the answer, on a real PostgreSQL: order-aware handling (older versions recorded
 * as superseded, never applied; state never moves backwards, also under concurrent workers), retries
 * with backoff on an injected clock, dead letters and redrive, takeover of a lost claim, and
 * retention with the sweep.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fromPg, type PgClientLike } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import type { Transaction } from '../../src/core/sql.js';
import {
  createWebhookReceiver,
  createGithubVerifier,
  normaliseEntity,
  recordHeaders,
  createStandardWebhooksVerifier,
  type WebhookEvent,
  type WebhookHandlers,
  type WebhookProcessor,
  type WebhookProcessorOptions,
  type WebhookReceiver,
} from '../../src/webhooks/index.js';
import { renderReceiptStatements } from '../../src/webhooks/statements.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import {
  capturingEvents,
  count,
  githubSecret,
  signGithub,
  signStandard,
  standardSecret,
  testProcessor,
} from './support.js';

const hour = 3_600_000;
const day = 24 * hour;
let db: TestSchema;
let clock: ManualClock;
let receiver: WebhookReceiver;
let sequence = 0;

interface CustomerEvent {
  type: string;
  data: { customer: string; status: string; version: number };
}

/** Stores a Standard Webhooks delivery through the receiver; returns its id. */
async function store(
  event: CustomerEvent | Record<string, unknown>,
  id = `msg_${++sequence}`,
): Promise<string> {
  const signed = signStandard({ id, body: JSON.stringify(event), timestampMs: clock.now() });
  const answer = await receiver.receive('billing', {
    headers: recordHeaders(signed.headers),
    body: signed.body,
  });
  expect(answer.status).toBe(202);
  return id;
}

function processor(
  handlers: WebhookHandlers<PgClientLike>,
  options: Partial<WebhookProcessorOptions<PgClientLike>> = {},
): WebhookProcessor<PgClientLike> {
  return testProcessor(db, clock, handlers, options);
}

const q = (text: string, params: unknown[] = []) =>
  db.pool.query(text.replaceAll('$schema', `"${db.schema}"`), params);

/** The order-aware handler of the tests: writes the customer's status and keeps a history of applied versions. */
const customerHandler = {
  entity: (event: WebhookEvent) => {
    const { data } = event.json<CustomerEvent>();
    return { key: data.customer, version: data.version };
  },
  async handle(tx: Transaction<PgClientLike>, event: WebhookEvent) {
    const { data } = event.json<CustomerEvent>();
    await tx.query(
      `INSERT INTO "${db.schema}".customers (id, status, version) VALUES ($1, $2, $3)
       ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, version = EXCLUDED.version`,
      [data.customer, data.status, data.version],
    );
    await tx.query(`INSERT INTO "${db.schema}".history (customer, version) VALUES ($1, $2)`, [
      data.customer,
      data.version,
    ]);
  },
};

beforeAll(async () => {
  db = await createTestSchema({ poolSize: 20 });
  await q(
    `CREATE TABLE $schema.customers (id text PRIMARY KEY, status text NOT NULL, version integer NOT NULL)`,
  );
  await q(
    `CREATE TABLE $schema.history (n bigserial PRIMARY KEY, customer text NOT NULL, version integer NOT NULL)`,
  );
  await q(`CREATE TABLE $schema.effects (delivery_id text NOT NULL)`);
});

afterAll(async () => {
  await db?.close();
});

beforeEach(async () => {
  clock = new ManualClock(Date.UTC(2030, 0, 1, 12));
  receiver = createWebhookReceiver({
    sql: fromPg(db.pool),
    schema: db.schema,
    clock,
    sources: {
      billing: createStandardWebhooksVerifier({ secrets: [standardSecret] }),
      short: { verifier: createStandardWebhooksVerifier({ secrets: [standardSecret] }), retentionMs: hour },
      github: createGithubVerifier({ secrets: [githubSecret] }),
    },
  });
  await q(`DELETE FROM $schema.webhook_receipts`);
});

describe('order-aware handling', () => {
  it('out-of-order versions never regress state: older events are recorded as superseded and never applied', async () => {
    const worker = processor({ billing: { 'customer.updated': customerHandler } });
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.shuffledSubarray([1, 2, 3, 4, 5, 6, 7, 8], { minLength: 1 }), async (versions) => {
        const customer = `c-${++run}`;
        const applied: number[] = [];
        let highest = 0;
        for (const version of versions) {
          await store({ type: 'customer.updated', data: { customer, status: `s${version}`, version } });
          const [outcome] = await worker.drain();
          // Arrival order is processing order here: superseded exactly when a higher version came first.
          expect(outcome).toBe(version >= highest ? 'applied' : 'superseded');
          if (version >= highest) applied.push(version);
          highest = Math.max(highest, version);
          const { rows } = await q(`SELECT status, version FROM $schema.customers WHERE id = $1`, [customer]);
          expect(rows[0]).toEqual({ status: `s${highest}`, version: highest });
        }
        const { rows } = await q(`SELECT version FROM $schema.history WHERE customer = $1 ORDER BY n`, [
          customer,
        ]);
        expect(rows.map((r: { version: number }) => r.version)).toEqual(applied);
      }),
      { numRuns: 25, seed: 5 },
    );
  });

  it('under concurrent workers, applied versions only ever increase and the last state is the highest', async () => {
    const worker = processor({ billing: { 'customer.updated': customerHandler } }, { concurrency: 8 });
    const versions = fc.sample(
      fc.shuffledSubarray(
        Array.from({ length: 40 }, (_, i) => i + 1),
        { minLength: 40 },
      ),
      {
        numRuns: 1,
        seed: 7,
      },
    )[0]!;
    for (const version of versions) {
      await store({ type: 'customer.updated', data: { customer: 'busy', status: `s${version}`, version } });
    }
    const flat: string[] = [];
    // Receipts that found the entity busy wait (woken when its holder commits, or after
    // entityBusyRetryMs): move the clock until nothing is left.
    for (let round = 0; round < 50; round++) {
      const outcomes = await Promise.all([
        worker.drain({ limit: 8 }),
        worker.drain({ limit: 8 }),
        worker.drain({ limit: 8 }),
      ]);
      flat.push(...outcomes.flat());
      if ((await count(db.pool, db.schema, 'webhook_receipts', `state IN ('pending', 'waiting')`)) === 0)
        break;
      clock.advance(1000);
    }
    const final = flat.filter((o) => o !== 'deferred');
    expect(final).toHaveLength(40);
    expect(final.filter((o) => o !== 'applied' && o !== 'superseded')).toEqual([]);
    const { rows } = await q(`SELECT version FROM $schema.history WHERE customer = 'busy' ORDER BY n`);
    const applied = rows.map((r: { version: number }) => r.version);
    expect(applied.length).toBe(final.filter((o) => o === 'applied').length);
    for (let i = 1; i < applied.length; i++) expect(applied[i]!).toBeGreaterThan(applied[i - 1]!);
    expect((await q(`SELECT version FROM $schema.customers WHERE id = 'busy'`)).rows[0]).toEqual({
      version: 40,
    });
    expect(await count(db.pool, db.schema, 'webhook_receipts', `state = 'superseded'`)).toBe(
      40 - applied.length,
    );
  });

  it('a superseded receipt records the entity and version it carried; a handler error rolls the version back', async () => {
    const captured = capturingEvents();
    let fail = true;
    const worker = processor(
      {
        billing: {
          'customer.updated': {
            entity: customerHandler.entity,
            async handle(tx, event) {
              await customerHandler.handle(tx, event);
              if (fail) throw new Error('downstream unavailable');
            },
          },
        },
      },
      { events: captured.events },
    );
    await store({ type: 'customer.updated', data: { customer: 'rb', status: 'new', version: 10 } });
    expect(await worker.drain()).toEqual(['retry']);
    // The failed attempt left neither the state nor the version behind: version 3 still applies.
    expect((await q(`SELECT count(*)::int AS n FROM $schema.customers WHERE id = 'rb'`)).rows[0]).toEqual({
      n: 0,
    });
    fail = false;
    await store({ type: 'customer.updated', data: { customer: 'rb', status: 'old', version: 3 } });
    expect(await worker.drain()).toEqual(['applied']);
    clock.advance(day);
    expect(await worker.drain()).toEqual(['applied']);
    const old = await store({
      type: 'customer.updated',
      data: { customer: 'rb', status: 'older', version: 2 },
    });
    expect(await worker.drain()).toEqual(['superseded']);
    expect(captured.of('webhook:superseded')).toEqual([
      {
        tenant: '',
        source: 'billing',
        deliveryId: old,
        eventType: 'customer.updated',
        attempt: 1,
        entity: { scope: 'billing', key: 'rb', version: '2' },
      },
    ]);
    expect(captured.kept.map((k) => k.name)).toEqual([
      'webhook:retried',
      'webhook:processed',
      'webhook:processed',
      'webhook:superseded',
    ]);
    const [receipt] = await worker.listReceipts({ states: ['superseded'] });
    expect(receipt).toMatchObject({
      deliveryId: old,
      entityScope: 'billing',
      entityKey: 'rb',
      entityVersion: '2',
    });
    expect((await q(`SELECT status, version FROM $schema.customers WHERE id = 'rb'`)).rows[0]).toEqual({
      status: 'new',
      version: 10,
    });
  });

  it('versions may be timestamps: Dates and ISO strings compare as epoch milliseconds', () => {
    expect(normaliseEntity({ key: 'k', version: new Date('2030-01-01T00:00:00Z') }, 's').version).toBe(
      '1893456000000',
    );
    expect(normaliseEntity({ key: 'k', version: '2030-01-01T00:00:00.001Z' }, 's').version).toBe(
      '1893456000001',
    );
    expect(normaliseEntity({ key: 'k', version: 12345678901234567890n }, 's').version).toBe(
      '12345678901234567890',
    );
    expect(normaliseEntity({ key: 'k', version: '98765432109876543210987654321' }, 's').version).toBe(
      '98765432109876543210987654321',
    );
    expect(() => normaliseEntity({ key: 'k', version: 'yesterday' }, 's')).toThrow(/version/);
  });
});

describe('retries, dead letters and redrive', () => {
  it('retries with backoff on the injected clock, then applies', async () => {
    let failures = 2;
    const worker = processor(
      {
        billing: {
          '*': async (tx, event) => {
            await tx.query(`INSERT INTO "${db.schema}".effects (delivery_id) VALUES ($1)`, [
              event.deliveryId,
            ]);
            if (failures-- > 0) throw new Error('not yet');
          },
        },
      },
      { backoff: { baseMs: 1000, maxMs: 60_000, jitter: 0.5 } },
    );
    const id = await store({ type: 'anything' });
    expect(await worker.drain()).toEqual(['retry']);
    const [pending] = await worker.listReceipts({ states: ['pending'] });
    // random 0.5 with equal jitter: 1000 * 0.5 + 1000 * 0.5 * 0.5 = 750 ms.
    expect(pending!.nextAttemptAt! - clock.now()).toBe(750);
    expect(pending!.lastError).toContain('not yet');
    expect(await worker.drain()).toEqual([]);
    clock.advance(750);
    expect(await worker.drain()).toEqual(['retry']);
    clock.advance(1499);
    expect(await worker.drain()).toEqual([]);
    clock.advance(1);
    expect(await worker.drain()).toEqual(['applied']);
    // The failed attempts' writes were rolled back: one effect.
    expect(
      (await q(`SELECT count(*)::int AS n FROM $schema.effects WHERE delivery_id = $1`, [id])).rows[0],
    ).toEqual({ n: 1 });
    const [applied] = await worker.listReceipts({ states: ['applied'] });
    expect(applied).toMatchObject({ deliveryId: id, attempts: 3, lastError: null });
  });

  it('exhausted attempts make a dead letter; redrive runs it again', async () => {
    const captured = capturingEvents();
    let broken = true;
    const worker = processor(
      {
        billing: {
          '*': async () => {
            if (broken) throw new Error('bug');
          },
        },
      },
      { maxAttempts: 3, backoff: { baseMs: 1000, jitter: 0 }, events: captured.events },
    );
    const id = await store({ type: 'anything' });
    const receipt = { tenant: '', source: 'billing', deliveryId: id, eventType: 'anything' };
    const outcomes: string[] = [];
    for (let i = 0; i < 5; i++) {
      outcomes.push(...(await worker.drain()));
      clock.advance(10_000);
    }
    expect(outcomes).toEqual(['retry', 'retry', 'dead']);
    const [dead] = await worker.listReceipts();
    expect(dead).toMatchObject({ deliveryId: id, state: 'dead', attempts: 3 });
    expect(dead!.lastError).toContain('bug');
    // Each attempt's end is one event, in order, with what the receipt's record says.
    expect(captured.kept.map((k) => k.name)).toEqual(['webhook:retried', 'webhook:retried', 'webhook:dead']);
    expect(captured.of('webhook:retried')[0]).toEqual({
      ...receipt,
      attempt: 1,
      error: 'Error: bug',
      nextAttemptAt: expect.any(Number) as unknown,
    });
    expect(captured.of('webhook:dead')).toEqual([
      { ...receipt, attempt: 3, error: 'Error: bug', invalid: false },
    ]);
    broken = false;
    expect(await worker.redrive({ source: 'billing' })).toBe(1);
    expect(await worker.drain()).toEqual(['applied']);
    expect(await worker.listReceipts()).toEqual([]);
    expect(captured.kept.slice(3)).toEqual([
      { name: 'webhook:redriven', event: { count: 1, states: ['dead'], source: 'billing' } },
      { name: 'webhook:processed', event: { ...receipt, attempt: 1, outcome: 'applied' } },
    ]);
  });

  it('an error marked not retryable is a dead letter at once', async () => {
    const worker = processor({
      billing: {
        '*': async () => {
          throw Object.assign(new Error('invalid payload'), { retryable: false });
        },
      },
    });
    await store({ type: 'x' });
    expect(await worker.drain()).toEqual(['dead']);
  });

  it('unhandled receipts are redriven once a handler exists', async () => {
    const id = await store({ type: 'brand.new' });
    expect(await processor({ billing: {} }).drain()).toEqual(['unhandled']);
    const later = processor({ billing: { 'brand.new': async () => {} } });
    expect(await later.redrive({ states: ['unhandled'], deliveryIds: [id] })).toBe(1);
    expect(await later.drain()).toEqual(['applied']);
  });

  it('a claim whose worker died is taken over after the lease, and the old holder is fenced out', async () => {
    const worker = processor({ billing: { '*': async () => {} } }, { leaseMs: 30_000 });
    const id = await store({ type: 'x' });
    // A worker claims and dies before its transaction: the claim statement, run by hand.
    const statements = renderReceiptStatements(db.schema);
    const claimed = await statements.claim(fromPg(db.pool), {
      now: new Date(clock.now()),
      limit: 10,
      leaseUntil: new Date(clock.now() + 30_000),
    });
    expect(claimed).toHaveLength(1);
    expect(await worker.drain()).toEqual([]);
    clock.advance(30_000);
    expect(await worker.drain()).toEqual(['applied']);
    // The dead worker's late write carries attempt 1 and changes nothing.
    const late = await statements.fail(fromPg(db.pool), {
      receipt: { tenant_id: '', source: 'billing', delivery_id: id, attempts: 1 },
      state: 'pending',
      due: new Date(clock.now()),
      error: 'late',
    });
    expect(late).toBe(0);
    const [row] = await worker.listReceipts({ states: ['applied'] });
    expect(row).toMatchObject({ deliveryId: id, attempts: 2 });
  });

  it('many workers in parallel apply every receipt exactly once', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 120; i++) ids.push(await store({ type: 'count' }));
    const handlers: WebhookHandlers<PgClientLike> = {
      billing: {
        count: async (tx, event) => {
          await tx.query(`INSERT INTO "${db.schema}".effects (delivery_id) VALUES ($1)`, [event.deliveryId]);
        },
      },
    };
    const workers = [processor(handlers), processor(handlers), processor(handlers)];
    const outcomes = (await Promise.all(workers.map((w) => w.drain({ limit: 5 })))).flat();
    expect(outcomes).toHaveLength(120);
    const { rows } = await q(
      `SELECT count(*)::int AS total, count(DISTINCT delivery_id)::int AS distinct FROM $schema.effects WHERE delivery_id = ANY($1)`,
      [ids],
    );
    expect(rows[0]).toEqual({ total: 120, distinct: 120 });
  });
});

describe('retention', () => {
  it('per-source defaults and overrides; the sweep keeps dead and pending receipts', async () => {
    const worker = processor({
      billing: {
        ok: async () => {},
        bad: async () => Promise.reject(Object.assign(new Error('x'), { retryable: false })),
      },
      short: { '*': async () => {} },
      github: { '*': async () => {} },
    });
    await store({ type: 'ok' });
    await store({ type: 'bad' });
    const shortSigned = signStandard({ id: 'short-1', body: '{"type":"ok"}', timestampMs: clock.now() });
    await receiver.receive('short', { headers: recordHeaders(shortSigned.headers), body: shortSigned.body });
    const gh = signGithub({ delivery: 'g-1', hookId: '9', event: 'push', body: '{}' });
    await receiver.receive('github', { headers: recordHeaders(gh.headers), body: gh.body });
    await worker.drain();
    await store({ type: 'ok' }); // stays pending: never processed

    const states = async () =>
      (await q(`SELECT source, state FROM $schema.webhook_receipts ORDER BY source, state`)).rows.map(
        (r: { source: string; state: string }) => `${r.source}:${r.state}`,
      );
    clock.advance(hour + 1);
    expect(await worker.sweep()).toEqual({ deleted: 1, cleared: 0 }); // the short source's receipt
    clock.advance(4 * day - hour - 2);
    expect(await worker.sweep()).toEqual({ deleted: 0, cleared: 0 });
    expect(await states()).toEqual(['billing:applied', 'billing:dead', 'billing:pending', 'github:applied']);
    clock.advance(2);
    expect(await worker.sweep({ batchSize: 1 })).toEqual({ deleted: 2, cleared: 0 });
    expect(await states()).toEqual(['billing:dead', 'billing:pending']);
  });

  it('after a receipt is swept, a very late replay of an old event is still superseded by its entity version', async () => {
    const worker = processor({ billing: { 'customer.updated': customerHandler } });
    const event = (version: number) => ({
      type: 'customer.updated',
      data: { customer: 'late', status: `s${version}`, version },
    });
    const firstId = await store(event(1));
    await store(event(2));
    // One at a time: claimed together, the two would race and version 1 could be superseded already.
    expect(await worker.drain({ limit: 1 })).toEqual(['applied', 'applied']);
    clock.advance(5 * day);
    await worker.sweep();
    expect(await count(db.pool, db.schema, 'webhook_receipts')).toBe(0);
    // The sender replays delivery 1 long after retention: stored again, but never applied.
    await store(event(1), firstId);
    expect(await worker.drain()).toEqual(['superseded']);
    expect((await q(`SELECT version FROM $schema.customers WHERE id = 'late'`)).rows[0]).toEqual({
      version: 2,
    });
  });
});
