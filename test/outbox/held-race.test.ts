import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import type { Sql } from '../../src/core/sql.js';
import { createEvents } from '../../src/core/event-channel.js';
import { createOutboxDispatcher } from '../../src/outbox/dispatcher.js';
import { createOutbox, type Outbox } from '../../src/outbox/outbox.js';
import type { OutboxEvent, PublishResult } from '../../src/outbox/types.js';
import { createTestSchema, type TestSchema } from '../support/database.js';

/** The races these tests provoke are reported as `error` events; nobody needs them on stderr. */
const quiet = createEvents();
quiet.on('error', () => undefined);

let db: TestSchema;
let sql: Sql;

beforeAll(async () => {
  db = await createTestSchema({ poolSize: 6 });
  sql = fromPg(db.pool);
});
afterAll(() => db.close());

/**
 * Two dispatchers whose clocks disagree by a few milliseconds (two processes, or one dispatcher
 * that read its clock before waiting for a connection): one already holds a key whose head just
 * became due, the other still sees that head backing off and would hold back the key's later
 * events. Holding them back changed rows the first dispatcher was publishing, its mark missed
 * them, and they were published a second time.
 */
describe('a dispatcher with a clock behind another', () => {
  it('does not move the events of a key another dispatcher holds: each event is published and marked once', async () => {
    const topic = 'held-race';
    const early = new ManualClock(1_000_000);
    const late = new ManualClock(1_000_000);
    const outbox: Outbox = createOutbox({ sql, schema: db.schema, clock: early });
    const accepted: string[] = [];
    let refuseHead = true;
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const inPublish = new Promise<void>((resolve) => (entered = resolve));
    const blockNext = { value: false };
    const publisher = {
      name: 'gated',
      publish: async (events: readonly OutboxEvent[]): Promise<PublishResult[]> => {
        if (blockNext.value) {
          blockNext.value = false;
          entered();
          await released;
        }
        return events.map((event) => {
          if (refuseHead && event.type === 'head') {
            refuseHead = false;
            return { id: event.id, ok: false, error: new Error('refused once'), retryable: true };
          }
          accepted.push(event.id);
          return { id: event.id, ok: true };
        });
      },
    };
    const dispatcherAt = (clock: ManualClock) =>
      createOutboxDispatcher({
        sql,
        publisher,
        schema: db.schema,
        clock,
        topics: [topic],
        batchSize: 6,
        random: () => 0,
        backoff: { baseMs: 1000, maxMs: 1000 },
        events: quiet,
      });
    const ahead = dispatcherAt(late);
    const behind = dispatcherAt(early);

    const head = await sql.transaction((tx) => outbox.add(tx, { topic, key: 'k', type: 'head', payload: 0 }));
    // The head fails once: it backs off until 1 001 000.
    expect(await ahead.runOnce()).toMatchObject({ claimed: 1, retried: 1 });
    // Later events of the key, added while the head backs off, each due at once on its own; between
    // them, events of another key fill the claim's candidates, so the dispatcher that takes the key
    // reads \`next\` in its run without having picked it as a candidate.
    early.advance(10);
    const add = (key: string, type: string) =>
      sql.transaction((tx) => outbox.add(tx, { topic, key, type, payload: type }));
    const between = await add('k', 'between');
    early.advance(10);
    const others: string[] = [];
    for (let i = 0; i < 5; i++) others.push(await add('o', `o${i}`));
    early.advance(10);
    const next = await add('k', 'next');

    // The dispatcher ahead sees the head due, locks it and reads its run, and waits on the broker.
    late.advance(1000);
    blockNext.value = true;
    const running = ahead.runOnce();
    await inPublish;
    // The dispatcher behind still sees the head backing off while the other one holds it.
    const meanwhile = await behind.runOnce().finally(release);
    // head, between and next of the key; o0, o1 and o2 of the other.
    expect(await running).toMatchObject({ claimed: 6, published: 6 });
    expect(accepted).toEqual([head, others[0], between, others[1], next, others[2]]);
    expect((await outbox.get({ id: next }))?.publishedAt).not.toBeNull();
    // The dispatcher behind took nothing and moved nothing of the key held by the other.
    expect(meanwhile).toMatchObject({ claimed: 0, held: 0 });
    // Nothing left to publish again, by either dispatcher, however late.
    late.advance(60_000);
    early.advance(61_000);
    await ahead.drain();
    await behind.drain();
    const all = [head, between, next, ...others];
    expect([...accepted].sort()).toEqual([...all].sort());
  });
});

/**
 * The mark finds a published event by the ctid the claim read it at. A run's later events are read
 * without a lock, so their row can change while the batch is at the broker (another dispatcher
 * behind in time whose snapshot predates this one's lock, an operator's UPDATE): each of the four
 * mark statements (one tenant or several, kept or deleted) still marks such an event once.
 */
describe('an event whose row changed while its batch was at the broker', () => {
  const cases = [
    { name: 'default tenant, kept', tenants: [''], retention: undefined },
    { name: 'named tenant, kept', tenants: ['acme'], retention: undefined },
    { name: 'two tenants in one batch, kept', tenants: ['acme', 'zeta'], retention: undefined },
    { name: 'named tenant, deleted at once', tenants: ['acme'], retention: 0 },
    { name: 'two tenants in one batch, deleted at once', tenants: ['acme', 'zeta'], retention: 0 },
  ];
  for (const { name, tenants, retention } of cases) {
    it(`${name}: is marked, and never published again`, async () => {
      const topic = `moved-${name}`;
      const outbox = createOutbox({ sql, schema: db.schema });
      const ids: { tenant: string; id: string }[] = [];
      await sql.transaction(async (tx) => {
        for (const tenant of tenants) {
          for (let i = 0; i < 3; i++) {
            ids.push({
              tenant,
              id: await outbox.add(tx, { topic, tenant, key: 'k', type: `e${i}`, payload: i }),
            });
          }
        }
      });
      const accepted: string[] = [];
      let touched = 0;
      const dispatcher = createOutboxDispatcher({
        sql,
        schema: db.schema,
        topics: [topic],
        ...(retention === undefined ? {} : { publishedRetentionMs: retention }),
        events: quiet,
        publisher: {
          publish: async (events) => {
            // Every event but the heads gets a new row version before the broker answers.
            if (touched++ === 0) {
              for (const { tenant, id } of ids) {
                await db.pool.query(
                  `UPDATE "${db.schema}".outbox SET available_at = available_at - interval '1 ms'
                   WHERE tenant_id = $1 AND id = $2 AND type <> 'e0'`,
                  [tenant, id],
                );
              }
            }
            accepted.push(...events.map((e) => `${e.tenant}/${e.id}`));
            return events.map((e) => ({ id: e.id, ok: true as const }));
          },
        },
      });
      expect(await dispatcher.runOnce()).toMatchObject({ claimed: ids.length, published: ids.length });
      expect((await dispatcher.drain()).claimed).toBe(0);
      expect([...accepted].sort()).toEqual(ids.map(({ tenant, id }) => `${tenant}/${id}`).sort());
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE aggregatetype = $1 AND published_at IS NULL`,
        [topic],
      );
      expect(rows[0]!.n).toBe(0);
      if (retention === 0) {
        const left = await db.pool.query(`SELECT 1 FROM "${db.schema}".outbox WHERE aggregatetype = $1`, [
          topic,
        ]);
        expect(left.rowCount).toBe(0);
      }
    });
  }
});
