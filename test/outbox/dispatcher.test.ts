import { validate, version } from 'uuid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import type { Sql } from '../../src/core/sql.js';
import { createEvents, type IdemErrorEvent, type IdemEvents } from '../../src/core/event-channel.js';
import { createBackoff } from '../../src/core/resilience/backoff.js';
import { createOutboxDispatcher } from '../../src/outbox/dispatcher.js';
import { dispatcherBackoff } from '../../src/outbox/dispatcher-options.js';
import { createOutbox, type Outbox } from '../../src/outbox/outbox.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { orderViolations, RecordingPublisher } from './support.js';

let db: TestSchema;
let sql: Sql;
let clock: ManualClock;
let outbox: Outbox;

beforeAll(async () => {
  db = await createTestSchema();
  sql = fromPg(db.pool);
  clock = new ManualClock();
  outbox = createOutbox({ sql, schema: db.schema, clock });
});
afterAll(() => db.close());

/** Each test uses its own topic, so tests in this file never see each other's events. */
let topicCounter = 0;
const newTopic = () => `t${++topicCounter}`;

/** A channel whose `error` events are heard (by nobody in particular): the tests' stderr stays quiet. */
function quietEvents(): IdemEvents {
  const events = createEvents();
  events.on('error', () => undefined);
  return events;
}

function dispatcherFor(topic: string, publisher: RecordingPublisher, extra: Record<string, unknown> = {}) {
  return createOutboxDispatcher({
    sql,
    publisher,
    schema: db.schema,
    clock,
    topics: [topic],
    random: () => 0, // no jitter: the full backoff, so tests know when a retry is due
    backoff: { baseMs: 1000, maxMs: 60_000 },
    events: quietEvents(),
    ...extra,
  });
}

async function addEvents(topic: string, keys: string[], perKey: number): Promise<Map<string, number>> {
  const order = new Map<string, number>();
  for (let i = 0; i < perKey; i++) {
    await sql.transaction(async (tx) => {
      for (const key of keys) {
        const id = await outbox.add(tx, { topic, key, type: `e${i}`, payload: { key, i } });
        order.set(id, i);
      }
    });
  }
  return order;
}

describe('outbox.add', () => {
  it('writes in the caller transaction: a rollback leaves no event', async () => {
    const topic = newTopic();
    await expect(
      sql.transaction(async (tx) => {
        await outbox.add(tx, { topic, key: 'k', type: 'x', payload: 1 });
        throw new Error('business failure');
      }),
    ).rejects.toThrow('business failure');
    const publisher = new RecordingPublisher();
    const result = await dispatcherFor(topic, publisher).drain();
    expect(result.claimed).toBe(0);
    expect(publisher.accepted).toHaveLength(0);
  });

  it('gives UUIDv7 ids and hands the publisher exactly what was added', async () => {
    const topic = newTopic();
    const id = await sql.transaction((tx) =>
      outbox.add(tx, {
        topic,
        key: 'order-1',
        type: 'order.created',
        payload: { total: 12.5, items: ['a', 'b'], note: 'é' },
        headers: { 'trace-id': 'abc' },
      }),
    );
    expect(validate(id) && version(id)).toBe(7);
    const publisher = new RecordingPublisher();
    await dispatcherFor(topic, publisher).drain();
    expect(publisher.accepted).toHaveLength(1);
    const event = publisher.accepted[0]!;
    expect(event).toMatchObject({
      id,
      topic,
      key: 'order-1',
      type: 'order.created',
      payload: { total: 12.5, items: ['a', 'b'], note: 'é' },
      headers: { 'trace-id': 'abc' },
      attempts: 0,
    });
    expect(event.createdAt).toBe(clock.now());
    expect((await outbox.get({ id: id }))?.publishedAt).toBe(clock.now());
  });

  it('addMany keeps array order within a key', async () => {
    const topic = newTopic();
    const ids = await sql.transaction((tx) =>
      outbox.addMany(
        tx,
        Array.from({ length: 20 }, (_, i) => ({ topic, key: i % 2 ? 'a' : 'b', type: 'n', payload: i })),
      ),
    );
    const publisher = new RecordingPublisher();
    await dispatcherFor(topic, publisher).drain();
    const order = new Map(ids.map((id, i) => [id, Math.floor(i / 2)]));
    expect(publisher.accepted).toHaveLength(20);
    expect(orderViolations(publisher.accepted, order)).toEqual([]);
  });
});

describe('dispatcher', () => {
  it('publishes in per-key order, one event per key per publish call', async () => {
    const topic = newTopic();
    const order = await addEvents(topic, ['a', 'b', 'c'], 4);
    const publisher = new RecordingPublisher();
    const result = await dispatcherFor(topic, publisher).drain();
    expect(result.published).toBe(12);
    expect(orderViolations(publisher.accepted, order)).toEqual([]);
    for (const call of publisher.calls) {
      const keys = call.map((e) => e.key);
      expect(new Set(keys).size).toBe(keys.length);
    }
  });

  it('a failing head blocks later events of its key, not other keys, and is retried after its backoff', async () => {
    const topic = newTopic();
    const order = await addEvents(topic, ['bad', 'good'], 3);
    const publisher = new RecordingPublisher();
    let failures = 2;
    publisher.refuse = (e) => e.key === 'bad' && failures-- > 0;
    const events = quietEvents();
    const published: string[] = [];
    const retried: string[] = [];
    events.on('outbox:published', ({ events }) => published.push(...events.map((e) => `${e.key}/${e.type}`)));
    events.on('outbox:retried', ({ event, error, retryInMs }) =>
      retried.push(`${event.key}/${event.type} attempt ${event.attempts + 1} in ${retryInMs}: ${error}`),
    );
    const dispatcher = dispatcherFor(topic, publisher, { events });

    const first = await dispatcher.drain();
    expect(first).toMatchObject({ published: 3, retried: 1 });
    expect(publisher.accepted.map((e) => e.key)).toEqual(['good', 'good', 'good']);
    // Reported after the batch committed, as the counts say.
    expect(published).toEqual(['good/e0', 'good/e1', 'good/e2']);
    expect(retried).toEqual(['bad/e0 attempt 1 in 1000: Error: refused e0']);

    // Not due yet: nothing happens, and the held-back events do not count as work.
    clock.advance(999);
    expect((await dispatcher.drain()).claimed).toBe(0);
    clock.advance(1);
    expect(await dispatcher.drain()).toMatchObject({ published: 0, retried: 1 });
    // Second failure: backoff doubles to 2 s.
    clock.advance(1999);
    expect((await dispatcher.drain()).claimed).toBe(0);
    clock.advance(1);
    expect(await dispatcher.drain()).toMatchObject({ published: 3 });
    expect(orderViolations(publisher.accepted, order)).toEqual([]);
    const bad = publisher.accepted.filter((e) => e.key === 'bad');
    expect(bad.map((e) => e.type)).toEqual(['e0', 'e1', 'e2']);
    expect(bad[0]!.attempts).toBe(2);
  });

  it('parks a poison event as dead with its error; its key waits, other keys flow; redrive resumes in order', async () => {
    const topic = newTopic();
    const order = await addEvents(topic, ['poison', 'fine'], 2);
    const publisher = new RecordingPublisher();
    publisher.refuse = (e) => e.key === 'poison' && e.type === 'e0';
    const dead: string[] = [];
    const events = quietEvents();
    events.on('outbox:dead', ({ event, error }) => {
      expect(error).toBe('Error: refused e0');
      dead.push(event.id);
    });
    const dispatcher = dispatcherFor(topic, publisher, { maxAttempts: 3, events });

    for (let i = 0; i < 3; i++) {
      await dispatcher.drain();
      clock.advance(60_000);
    }
    expect(dead).toHaveLength(1);
    const record = await outbox.get({ id: dead[0]! });
    expect(record).toMatchObject({ attempts: 3, lastError: 'Error: refused e0', publishedAt: null });
    expect(record?.deadAt).not.toBeNull();
    expect(publisher.accepted.map((e) => `${e.key}/${e.type}`)).toEqual(['fine/e0', 'fine/e1']);

    // New events keep flowing for other keys; the parked key's new events wait behind the dead one.
    const more = await addEvents(topic, ['poison', 'fine'], 1);
    await dispatcher.drain();
    expect(publisher.accepted.map((e) => `${e.key}/${e.type}`)).toEqual(['fine/e0', 'fine/e1', 'fine/e0']);
    const stats = await outbox.stats();
    expect(stats.dead).toBeGreaterThanOrEqual(1);
    expect(stats.parked).toBeGreaterThanOrEqual(2);

    // The operator fixes the cause and redrives: the key resumes, in order.
    publisher.refuse = () => false;
    expect(await outbox.redrive({ topic })).toEqual({ revived: 1, released: 2 });
    await dispatcher.drain();
    const poison = publisher.accepted.filter((e) => e.key === 'poison');
    // Exactly the poison key's three events, once each, in the order they were added.
    expect(poison.map((e) => e.type)).toEqual(['e0', 'e1', 'e0']);
    expect(poison[2]!.id).toBe([...more.keys()].find((id) => poison.some((p) => p.id === id)));
    expect(orderViolations(poison, order)).toEqual([]);
    expect(poison[0]!.attempts).toBe(0);
    expect((await outbox.get({ id: dead[0]! }))?.deadAt).toBeNull();
  });

  it('a non-retryable failure parks the event at once', async () => {
    const topic = newTopic();
    await addEvents(topic, ['k'], 2);
    const publisher = new RecordingPublisher();
    publisher.refuse = (e) => e.type === 'e0';
    publisher.permanent = true;
    const result = await dispatcherFor(topic, publisher).drain();
    expect(result).toMatchObject({ dead: 1, published: 0, skipped: 1 });
  });

  it('an unreachable destination counts no attempt and parks nothing', async () => {
    const topic = newTopic();
    await addEvents(topic, ['k1', 'k2'], 2);
    const publisher = new RecordingPublisher();
    publisher.unreachable = true;
    const dispatcher = dispatcherFor(topic, publisher, { maxAttempts: 1 });
    for (let i = 0; i < 5; i++) {
      const result = await dispatcher.drain();
      expect(result.outage).toBeDefined();
      expect(result.dead + result.retried).toBe(0);
    }
    publisher.unreachable = false;
    const result = await dispatcher.drain();
    expect(result.published).toBe(4);
    expect(publisher.accepted.every((e) => e.attempts === 0)).toBe(true);
  });

  it('cleans up published rows past the retention, keeping pending and dead ones', async () => {
    const topic = newTopic();
    await addEvents(topic, ['x'], 3);
    const publisher = new RecordingPublisher();
    await dispatcherFor(topic, publisher).drain();
    const pendingId = await sql.transaction((tx) =>
      outbox.add(tx, { topic, key: 'y', type: 'later', payload: null }),
    );
    clock.advance(3_600_000);
    expect(await outbox.sweep({ olderThanMs: 7_200_000 })).toEqual({ deleted: 0, cleared: 0 });
    clock.advance(3_600_001);
    // The deprecated name answers the count, as before.
    expect((await outbox.sweep({ olderThanMs: 7_200_000, batchSize: 1 })).deleted).toBeGreaterThanOrEqual(3);
    expect(await outbox.get({ id: pendingId })).not.toBeNull();
  });

  it('with retention 0 a published event is deleted as it is marked', async () => {
    const topic = newTopic();
    const order = await addEvents(topic, ['x'], 2);
    const publisher = new RecordingPublisher();
    await dispatcherFor(topic, publisher, { publishedRetentionMs: 0 }).drain();
    expect(publisher.accepted).toHaveLength(2);
    for (const id of order.keys()) expect(await outbox.get({ id: id })).toBeNull();
  });

  it('a hot key fills whole batches', async () => {
    const topic = newTopic();
    await sql.transaction((tx) =>
      outbox.addMany(
        tx,
        Array.from({ length: 50 }, (_, i) => ({ topic, key: 'hot', type: 'n', payload: i })),
      ),
    );
    const publisher = new RecordingPublisher();
    const dispatcher = dispatcherFor(topic, publisher, { batchSize: 20 });
    expect((await dispatcher.runOnce()).published).toBe(20);
    expect(publisher.accepted.map((e) => e.payload)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    await dispatcher.drain();
    expect(publisher.accepted.map((e) => e.payload)).toEqual(Array.from({ length: 50 }, (_, i) => i));
  });

  it('events held behind a parked key leave the scan, so newer keys are reached even with a small batch', async () => {
    const topic = newTopic();
    await addEvents(topic, ['parked'], 1);
    const publisher = new RecordingPublisher();
    publisher.refuse = (e) => e.key === 'parked';
    publisher.permanent = true;
    const dispatcher = dispatcherFor(topic, publisher, { batchSize: 10 });
    expect((await dispatcher.drain()).dead).toBe(1);
    // 50 more for the parked key, then 5 for another key, all due now and older than the others.
    await sql.transaction((tx) =>
      outbox.addMany(
        tx,
        Array.from({ length: 50 }, (_, i) => ({ topic, key: 'parked', type: 'late', payload: i })),
      ),
    );
    await addEvents(topic, ['free'], 5);
    const result = await dispatcher.drain();
    expect(result.held).toBe(50);
    expect(result.published).toBe(5);
    expect(publisher.accepted.map((e) => e.key)).toEqual(['free', 'free', 'free', 'free', 'free']);
    expect((await outbox.stats({ topic })).parked).toBe(50);
  });

  it('a publish that hangs past publishTimeoutMs is an outage: aborted, no attempt counted', async () => {
    const topic = newTopic();
    const [id] = [...(await addEvents(topic, ['k'], 1)).keys()];
    let aborted = false;
    const events = createEvents();
    const errors: IdemErrorEvent[] = [];
    const outages: unknown[] = [];
    events.on('error', (e) => errors.push(e));
    events.on('outbox:outage', ({ error }) => outages.push(error));
    const dispatcher = createOutboxDispatcher({
      sql,
      schema: db.schema,
      clock,
      topics: [topic],
      publishTimeoutMs: 50,
      events,
      publisher: {
        publish: (_events, signal) =>
          new Promise((_, reject) =>
            signal.addEventListener('abort', () => {
              aborted = true;
              reject(signal.reason as Error);
            }),
          ),
      },
    });
    const result = await dispatcher.runOnce();
    expect(result.outage).toBeDefined();
    expect(aborted).toBe(true);
    expect(errors).toEqual([{ source: 'dispatcher', where: 'publish', error: result.outage }]);
    expect(outages).toEqual([result.outage]);
    expect(await outbox.get({ id: id! })).toMatchObject({ attempts: 0, publishedAt: null, deadAt: null });
  });

  it('backoff grows exponentially to its cap, with jitter between half and the whole delay', () => {
    const full = createBackoff({ baseMs: 100, maxMs: 1000 }, dispatcherBackoff, () => 0);
    expect([1, 2, 3, 4, 5, 6].map(full)).toEqual([100, 200, 400, 800, 1000, 1000]);
    const half = createBackoff({ baseMs: 100, maxMs: 1000 }, dispatcherBackoff, () => 1);
    expect([1, 2, 5].map(half)).toEqual([50, 100, 500]);
    expect(() => createBackoff({ baseMs: 10, maxMs: 5 }, dispatcherBackoff)).toThrow(/maxMs/);
  });
});
