import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg, fromPgClient } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import type { Sql } from '../../src/core/sql.js';
import { createEvents } from '../../src/core/event-channel.js';
import { createInbox, type Inbox } from '../../src/inbox/inbox.js';
import { createTestSchema, type TestSchema } from '../support/database.js';

let db: TestSchema;
let sql: Sql;
let clock: ManualClock;
let inbox: Inbox;
const events = createEvents();
const counts = { processed: 0, duplicates: 0 };
events.on('inbox:processed', () => counts.processed++);
events.on('inbox:duplicate', () => counts.duplicates++);

beforeAll(async () => {
  db = await createTestSchema();
  sql = fromPg(db.pool);
  clock = new ManualClock();
  inbox = createInbox({ sql, schema: db.schema, clock, retentionMs: 10_000, events });
  await sql.query(`CREATE TABLE "${db.schema}".effects (message_id text NOT NULL, n int)`);
});
afterAll(() => db.close());

const effects = async (messageId: string) =>
  Number(
    (
      await sql.query(`SELECT count(*)::int AS n FROM "${db.schema}".effects WHERE message_id = $1`, [
        messageId,
      ])
    ).rows[0]!.n,
  );

const apply = (messageId: string) => async (tx: { query: Sql['query'] }) => {
  await tx.query(`INSERT INTO "${db.schema}".effects (message_id) VALUES ($1)`, [messageId]);
  return 'done';
};

describe('inbox', () => {
  it('runs the handler once per (consumer, message id); a duplicate is skipped and reported', async () => {
    const m = { consumer: 'billing', messageId: 'm1' };
    const before = { ...counts };
    expect(await inbox.handle(m, apply('m1'))).toEqual({ duplicate: false, value: 'done' });
    expect(await inbox.handle(m, apply('m1'))).toEqual({ duplicate: true });
    expect(await inbox.handle(m, apply('m1'))).toEqual({ duplicate: true });
    expect(await effects('m1')).toBe(1);
    expect(counts.processed - before.processed).toBe(1);
    expect(counts.duplicates - before.duplicates).toBe(2);
    expect((await inbox.get(m))?.duplicates).toBe(2);
    // Another consumer of the same message processes it on its own.
    expect((await inbox.handle({ consumer: 'shipping', messageId: 'm1' }, apply('m1'))).duplicate).toBe(
      false,
    );
    expect(await effects('m1')).toBe(2);
  });

  it('reports each processed message and duplicate (handle and handleIn); a throwing listener changes nothing', async () => {
    const seen: string[] = [];
    const observer = createEvents();
    observer.on('inbox:processed', (m) => seen.push(`processed ${m.tenant}/${m.consumer}/${m.messageId}`));
    observer.on('inbox:duplicate', (m) => {
      seen.push(`duplicate ${m.tenant}/${m.consumer}/${m.messageId}`);
      throw new Error('a broken metrics backend');
    });
    const observed = createInbox({ sql, schema: db.schema, clock, events: observer });
    const m = { consumer: 'metrics', messageId: 'od-1' };
    expect((await observed.handle(m, apply('od-1'))).duplicate).toBe(false);
    expect(seen).toEqual(['processed /metrics/od-1']);
    expect(await observed.handle(m, apply('od-1'))).toEqual({ duplicate: true });
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      expect(await observed.handleIn(fromPgClient(client), m, apply('od-1'))).toEqual({ duplicate: true });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect(seen).toEqual(['processed /metrics/od-1', 'duplicate /metrics/od-1', 'duplicate /metrics/od-1']);
    expect(await effects('od-1')).toBe(1);
  });

  it('a failing handler leaves neither the record nor its writes; the redelivery runs it', async () => {
    const m = { consumer: 'billing', messageId: 'm2' };
    await expect(
      inbox.handle(m, async (tx) => {
        await apply('m2')(tx);
        throw new Error('downstream timeout');
      }),
    ).rejects.toThrow('downstream timeout');
    expect(await effects('m2')).toBe(0);
    expect(await inbox.get(m)).toBeNull();
    expect((await inbox.handle(m, apply('m2'))).duplicate).toBe(false);
    expect(await effects('m2')).toBe(1);
  });

  it('concurrent deliveries of one message: one effect, the other waits and is a duplicate', async () => {
    const m = { consumer: 'billing', messageId: 'm3' };
    const slow = async (tx: { query: Sql['query'] }) => {
      await apply('m3')(tx);
      await sleep(100);
      return 'done';
    };
    const results = await Promise.all([inbox.handle(m, slow), inbox.handle(m, slow), inbox.handle(m, slow)]);
    expect(results.filter((r) => !r.duplicate)).toHaveLength(1);
    expect(await effects('m3')).toBe(1);
  });

  it('works inside the caller transaction (handleIn) and rolls back with it', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await inbox.handleIn(fromPgClient(client), { consumer: 'c', messageId: 'm4' }, apply('m4'));
      await client.query('ROLLBACK');
      expect(await effects('m4')).toBe(0);
      await client.query('BEGIN');
      const r = await inbox.handleIn(fromPgClient(client), { consumer: 'c', messageId: 'm4' }, apply('m4'));
      await client.query('COMMIT');
      expect(r.duplicate).toBe(false);
      expect(await effects('m4')).toBe(1);
    } finally {
      client.release();
    }
  });

  it('a dead record keeps the message; a redelivery (redrive) runs the handler; processed is never marked dead', async () => {
    const m = { consumer: 'billing', messageId: 'm5' };
    const payload = Buffer.from('{"order":5}');
    expect(
      await inbox.markDead({
        ...m,
        attempts: 5,
        error: 'Error: boom',
        origin: 'orders',
        payload,
        headers: { a: 'b' },
      }),
    ).toBe(true);
    const dead = await inbox.get(m);
    expect(dead).toMatchObject({
      state: 'dead',
      attempts: 5,
      lastError: 'Error: boom',
      origin: 'orders',
      headers: { a: 'b' },
    });
    expect(Buffer.from(dead!.payload!).equals(payload)).toBe(true);
    expect((await inbox.handle(m, apply('m5'))).duplicate).toBe(false);
    expect(await effects('m5')).toBe(1);
    expect((await inbox.get(m))?.state).toBe('processed');
    expect(await inbox.markDead({ ...m, attempts: 1, error: 'late report' })).toBe(false);
    expect((await inbox.get(m))?.state).toBe('processed');
    expect((await inbox.handle(m, apply('m5'))).duplicate).toBe(true);
  });

  it('sweeps records past their retention, and only those', async () => {
    const old = { consumer: 'sweep', messageId: 'old' };
    await inbox.handle(old, async () => undefined);
    clock.advance(6_000);
    const fresh = { consumer: 'sweep', messageId: 'fresh' };
    await inbox.handle(fresh, async () => undefined);
    clock.advance(4_001);
    expect((await inbox.sweep({ batchSize: 1 })).deleted).toBeGreaterThanOrEqual(1);
    expect(await inbox.get(old)).toBeNull();
    expect(await inbox.get(fresh)).not.toBeNull();
    // Past the retention the id is forgotten: a (very late) redelivery would run again.
    expect((await inbox.handle(old, async () => undefined)).duplicate).toBe(false);
  });
});
