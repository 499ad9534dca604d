import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFactories, prepareAdapter } from '../support/adapters.js';
import { fromPg } from '../../src/adapters/pg.js';
import type { Sql } from '../../src/core/sql.js';
import { createEvents } from '../../src/core/event-channel.js';
import { createOutboxDispatcher, type OutboxDispatcher } from '../../src/outbox/dispatcher.js';
import { createOutbox, type Outbox } from '../../src/outbox/outbox.js';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { orderViolations, RecordingPublisher } from './support.js';

let db: TestSchema;
let sql: Sql;
let outbox: Outbox;

beforeAll(async () => {
  db = await createTestSchema({ poolSize: 8 });
  sql = fromPg(db.pool);
  outbox = createOutbox({ sql, schema: db.schema });
});
afterAll(() => db.close());

async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await sleep(10);
  }
}

describe('two dispatchers at once', () => {
  it('share the work and keep per-key order through random failures and retries', async () => {
    const topic = 'two-dispatchers';
    const keys = ['a', 'b', 'c', 'd', 'e', 'f'];
    const perKey = 25;
    const order = new Map<string, number>();
    const publisher = new RecordingPublisher();
    // Refuse about a third of the attempts, and let calls overlap so the dispatchers interleave.
    publisher.refuse = () => Math.random() < 0.3;
    publisher.delay = () => sleep(Math.floor(Math.random() * 3));
    const counts = { d1: { published: 0, retried: 0 }, d2: { published: 0, retried: 0 } };
    const start = (name: 'd1' | 'd2'): OutboxDispatcher => {
      // One channel per dispatcher, to count what each did.
      const events = createEvents();
      events.on('outbox:published', ({ events }) => (counts[name].published += events.length));
      events.on('outbox:retried', () => counts[name].retried++);
      events.on('error', ({ where, error }) => console.error(name, where, error));
      return createOutboxDispatcher({
        sql,
        publisher,
        schema: db.schema,
        topics: [topic],
        batchSize: 7,
        pollIntervalMs: 5,
        backoff: { baseMs: 2, maxMs: 10 },
        maxAttempts: 1000,
        events,
      });
    };
    const d1 = start('d1');
    const d2 = start('d2');
    await Promise.all([d1.start(), d2.start()]);
    // Producers keep adding while the dispatchers run.
    for (let i = 0; i < perKey; i++) {
      await sql.transaction(async (tx) => {
        for (const key of keys) order.set(await outbox.add(tx, { topic, key, type: `n${i}`, payload: i }), i);
      });
    }
    await waitFor(() => new Set(publisher.ids()).size === order.size, 30_000);
    await Promise.all([d1.stop(), d2.stop()]);

    expect(orderViolations(publisher.accepted, order)).toEqual([]);
    expect(counts.d1.published).toBeGreaterThan(0);
    expect(counts.d2.published).toBeGreaterThan(0);
    expect(counts.d1.retried + counts.d2.retried).toBeGreaterThan(0);
    // Each event was marked once: the published counts add up to the events, no double marking.
    expect(counts.d1.published + counts.d2.published).toBe(order.size);
    expect(publisher.accepted).toHaveLength(order.size);
  });
});

describe('dispatchers in parallel', () => {
  it('two loops publish disjoint batches of one topic at the same time, never sharing a key', async () => {
    const topic = 'parallel';
    // 40 keys, 3 events each, added in rounds: the first 40 events are the keys' heads.
    const order = new Map<string, number>();
    for (let round = 0; round < 3; round++) {
      await sql.transaction(async (tx) => {
        for (let k = 0; k < 40; k++) {
          order.set(await outbox.add(tx, { topic, key: `k${k}`, type: `r${round}`, payload: round }), round);
        }
      });
    }
    // The publisher holds every batch until two are in flight at once: with loops that only took
    // turns (a claim that saw the other loop's locked heads as its candidates), it would wait forever.
    let inFlight = 0;
    let batchesThatWaitedAlone = 0;
    let overlapped!: () => void;
    const overlap = new Promise<void>((resolve) => (overlapped = resolve));
    const keysInFlight: Set<string>[] = [];
    const accepted: { id: string; key: string }[] = [];
    const dispatcher = createOutboxDispatcher({
      sql,
      schema: db.schema,
      topics: [topic],
      batchSize: 10,
      concurrency: 2,
      pollIntervalMs: 5,
      publisher: {
        publish: async (events) => {
          const keys = new Set(events.map((e) => e.key));
          for (const other of keysInFlight) {
            for (const key of keys) expect(other.has(key), `key ${key} in two batches at once`).toBe(false);
          }
          keysInFlight.push(keys);
          if (++inFlight >= 2) overlapped();
          const timedOut = await Promise.race([overlap.then(() => false), sleep(5000).then(() => true)]);
          if (timedOut) batchesThatWaitedAlone++;
          inFlight--;
          keysInFlight.splice(keysInFlight.indexOf(keys), 1);
          accepted.push(...events.map((e) => ({ id: e.id, key: e.key })));
          return events.map((e) => ({ id: e.id, ok: true as const }));
        },
      },
    });
    await dispatcher.start();
    try {
      await waitFor(() => accepted.length === order.size, 30_000);
    } finally {
      await dispatcher.stop();
    }
    // The two loops overlapped: no batch sat out the 5 s alone waiting for the other loop.
    expect(batchesThatWaitedAlone).toBe(0);
    const byKey = new Map<string, number[]>();
    for (const { id, key } of accepted) byKey.set(key, [...(byKey.get(key) ?? []), order.get(id)!]);
    for (const rounds of byKey.values()) expect(rounds).toEqual([0, 1, 2]);
  });
});

describe('LISTEN/NOTIFY', () => {
  it('wakes the dispatcher at commit, long before its poll', async () => {
    const topic = 'notify';
    const publisher = new RecordingPublisher();
    const dispatcher = createOutboxDispatcher({
      sql,
      publisher,
      schema: db.schema,
      topics: [topic],
      listen: databaseUrl(),
      pollIntervalMs: 60_000,
    });
    await dispatcher.start();
    try {
      // The first wake after LISTEN connects may run an empty batch; let it pass.
      await sleep(50);
      // Woken by the notification: the 60 s poll would not come within the wait below.
      await sql.transaction((tx) => outbox.add(tx, { topic, key: 'k', type: 'x', payload: 1 }));
      await waitFor(() => publisher.accepted.length === 1, 20_000);
    } finally {
      await dispatcher.stop();
    }
  });

  it('a notification for another topic does not wake a dispatcher of other topics', async () => {
    const publisher = new RecordingPublisher();
    // A batch is one transaction (the self-test's NOTIFY and the sweep are plain statements).
    let batches = 0;
    const counted: Sql = {
      query: sql.query.bind(sql),
      transaction: (fn) => {
        batches++;
        return sql.transaction(fn);
      },
    };
    const dispatcher = createOutboxDispatcher({
      sql: counted,
      publisher,
      schema: db.schema,
      topics: ['only-this'],
      listen: databaseUrl(),
      pollIntervalMs: 60_000,
    });
    await dispatcher.start();
    try {
      await sleep(50);
      const before = batches;
      await sql.transaction((tx) =>
        outbox.add(tx, { topic: 'something-else', key: 'k', type: 'x', payload: 1 }),
      );
      await sleep(200);
      expect(batches).toBe(before);
      await sql.transaction((tx) => outbox.add(tx, { topic: 'only-this', key: 'k', type: 'x', payload: 1 }));
      await waitFor(() => publisher.accepted.length === 1, 5_000);
    } finally {
      await dispatcher.stop();
    }
  });
});

describe('outbox.add on every adapter', () => {
  for (const factory of adapterFactories) {
    it(`${factory.name}: commits with the caller's transaction and rolls back with it`, async () => {
      const schema = `idem_test_ob_${factory.name.replace(/\W/g, '')}_${Math.random().toString(36).slice(2, 8)}`;
      const adapter = await prepareAdapter(factory, schema);
      try {
        const ob = createOutbox({ sql: adapter.sql, schema });
        const id = await adapter.userTransaction(async (tx) => {
          await tx.query(`INSERT INTO "${schema}".effects (tenant, intent) VALUES ('t', 'i')`);
          return ob.add(tx, { topic: 'orders', key: 'o1', type: 'created', payload: { n: 1 } });
        });
        await expect(
          adapter.userTransaction(async (tx) => {
            await ob.addMany(tx, [{ topic: 'orders', key: 'o2', type: 'created', payload: { n: 2 } }]);
            throw new Error('rollback');
          }),
        ).rejects.toThrow('rollback');
        const { rows } = await adapter.sql.query(`SELECT id::text AS id FROM "${schema}".outbox`);
        expect(rows.map((r) => r.id)).toEqual([id]);
        const publisher = new RecordingPublisher();
        await createOutboxDispatcher({ sql: adapter.sql, publisher, schema }).drain();
        expect(publisher.accepted.map((e) => e.payload)).toEqual([{ n: 1 }]);
      } finally {
        await adapter.close();
      }
    }, 120_000); // PGlite (WASM) takes tens of seconds to start on a loaded 2-core machine
  }
});
