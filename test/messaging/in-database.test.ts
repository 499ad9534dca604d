/**
 * The in-database transport: outbox → inbox inside one PostgreSQL, with the dispatcher's order,
 * retries and dead events, and the inbox's dedupe (seed scenario 6 by SIGKILL).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createEvents, type Sql } from 'idem';
import { createInbox, type Inbox } from 'idem/inbox';
import {
  createInDatabasePublisher,
  createOutbox,
  createOutboxDispatcher,
  type Outbox,
  type OutboxEvent,
} from 'idem/outbox';
import { orderViolations } from '../outbox/support.js';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { spawnChild } from '../support/brokers.js';

let db: TestSchema;
let sql: Sql;
let outbox: Outbox;
let inbox: Inbox;
/** The inbox's channel: the in-database publisher's deliveries are the inbox's `handle`. */
const inboxEvents = createEvents();

beforeAll(async () => {
  db = await createTestSchema({ poolSize: 8 });
  sql = fromPg(db.pool);
  outbox = createOutbox({ sql, schema: db.schema });
  inbox = createInbox({ sql, schema: db.schema, events: inboxEvents });
  await sql.query(`CREATE TABLE "${db.schema}".effects (message_id text NOT NULL, consumer text)`);
});
afterAll(() => db.close());

const effects = async (consumer?: string): Promise<Map<string, number>> => {
  const { rows } = await sql.query<{ message_id: string; n: number }>(
    `SELECT message_id, count(*)::int AS n FROM "${db.schema}".effects
     WHERE $1::text IS NULL OR consumer = $1 GROUP BY message_id`,
    [consumer ?? null],
  );
  return new Map(rows.map((r) => [r.message_id, Number(r.n)]));
};

describe('in-database transport', () => {
  it('delivers each event once to every subscriber of its topic, in per-key order', async () => {
    const seen: OutboxEvent[] = [];
    const publisher = createInDatabasePublisher({
      inbox,
      subscribers: [
        {
          consumer: 'ledger',
          topics: ['payments'],
          handler: async (tx, event) => {
            seen.push(event);
            await tx.query(`INSERT INTO "${db.schema}".effects VALUES ($1, 'ledger')`, [event.id]);
          },
        },
        {
          consumer: 'audit',
          handler: async (tx, event) => {
            await tx.query(`INSERT INTO "${db.schema}".effects VALUES ($1, 'audit')`, [event.id]);
          },
        },
      ],
    });
    const order = new Map<string, number>();
    for (let i = 0; i < 5; i++) {
      await sql.transaction(async (tx) => {
        for (const key of ['a', 'b']) {
          order.set(await outbox.add(tx, { topic: 'payments', key, type: 'paid', payload: { i } }), i);
        }
        await outbox.add(tx, { topic: 'other', key: 'x', type: 'noted', payload: { i } });
      });
    }
    const result = await createOutboxDispatcher({
      sql,
      publisher,
      schema: db.schema,
      topics: ['payments', 'other'],
    }).drain();
    expect(result.published).toBe(15);
    expect(orderViolations(seen, order)).toEqual([]);
    expect([...(await effects('ledger')).values()]).toEqual(Array.from({ length: 10 }, () => 1));
    expect([...(await effects('audit')).values()]).toEqual(Array.from({ length: 15 }, () => 1));
  });

  it('a failing subscriber makes the event retry; the subscriber that committed is not run again', async () => {
    let failures = 1;
    const runs: string[] = [];
    const publisher = createInDatabasePublisher({
      inbox,
      subscribers: [
        {
          consumer: 'steady',
          handler: async (tx, event) => {
            runs.push(`steady:${event.type}`);
            await tx.query(`INSERT INTO "${db.schema}".effects VALUES ($1, 'steady')`, [event.id]);
          },
        },
        {
          consumer: 'flaky',
          handler: async (_tx, event) => {
            runs.push(`flaky:${event.type}`);
            if (failures-- > 0) throw new Error('flaky subscriber');
          },
        },
      ],
    });
    const id = await sql.transaction((tx) =>
      outbox.add(tx, { topic: 'retry', key: 'k', type: 'once', payload: 1 }),
    );
    const events = createEvents();
    const counts = { published: 0, retried: 0 };
    events.on('outbox:published', ({ events }) => (counts.published += events.length));
    events.on('outbox:retried', () => counts.retried++);
    events.on('error', () => undefined);
    const dispatcher = createOutboxDispatcher({
      sql,
      publisher,
      schema: db.schema,
      topics: ['retry'],
      backoff: { baseMs: 1, maxMs: 1 },
      events,
    });
    let published = 0;
    for (let i = 0; i < 50 && published === 0; i++) {
      published += (await dispatcher.drain()).published;
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(counts).toEqual({ published: 1, retried: 1 });
    expect(runs).toEqual(['steady:once', 'flaky:once', 'flaky:once']);
    expect((await effects('steady')).get(id)).toBe(1);
  });

  it('seed scenario 6: the dispatcher delivers, is killed before marking; the redelivery is deduped', async () => {
    const ids = await sql.transaction((tx) =>
      outbox.addMany(tx, [
        { topic: 'scenario6', key: 'a', type: 'x', payload: 1 },
        { topic: 'scenario6', key: 'b', type: 'x', payload: 2 },
      ]),
    );
    const child = spawnChild('dispatcher.ts', {
      DATABASE_URL: databaseUrl(),
      SCHEMA: db.schema,
      TRANSPORT: 'in-database',
      CONSUMER: 'scenario6',
      CRASH: 'after-publish',
    });
    expect((await child.exited).signal).toBe('SIGKILL');
    expect((await outbox.stats({ topic: 'scenario6' })).pending).toBe(2);
    const applied = await effects();
    expect(ids.map((id) => applied.get(id))).toEqual([1, 1]);

    const publisher = createInDatabasePublisher({
      inbox,
      subscribers: [
        {
          consumer: 'scenario6',
          handler: async () => {
            throw new Error('must not run again');
          },
        },
      ],
    });
    let duplicates = 0;
    const off = inboxEvents.on('inbox:duplicate', (e) => void (e.consumer === 'scenario6' && duplicates++));
    const result = await createOutboxDispatcher({
      sql,
      publisher,
      schema: db.schema,
      topics: ['scenario6'],
    }).drain();
    expect(result.published).toBe(2);
    off();
    expect(duplicates).toBe(2);
    const after = await effects();
    expect(ids.map((id) => after.get(id))).toEqual([1, 1]);
  });
});
