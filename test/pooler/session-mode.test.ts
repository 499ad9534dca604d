/**
 * PgBouncer in session mode: a client keeps one server connection for its whole session, so named
 * prepared statements and LISTEN work through it, and docs/operations/deployment.md says so. This checks it.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createEvents, createIdem, migrate } from 'idem';
import { createOutbox, createOutboxDispatcher, type OutboxEvent, type PublishResult } from 'idem/outbox';
import { databaseUrl } from '../support/database.js';
import { requirePgBouncer, startPgBouncer, type PgBouncer } from '../support/pgbouncer.js';
import { until } from '../support/poll.js';
import { turnedOffEvents } from '../support/events.js';

const binary = requirePgBouncer();

describe.skipIf(!binary)('PgBouncer in session mode', () => {
  let bouncer: PgBouncer;
  let pool: pg.Pool;
  const schema = `idem_pss_${randomBytes(3).toString('hex')}`;

  beforeAll(async () => {
    // As many server connections as the pools below open in all (6 + 1 LISTEN).
    bouncer = await startPgBouncer(binary!, { targetUrl: databaseUrl(), poolMode: 'session', poolSize: 8 });
    pool = new pg.Pool({ connectionString: bouncer.url, max: 6 });
    await migrate(fromPg(pool), { schema });
  });
  afterAll(async () => {
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
    await bouncer?.stop();
  });

  it('keeps named prepared statements: no refusal under concurrent load', async () => {
    const turnedOff: unknown[] = [];
    const idem = createIdem({
      sql: fromPg(pool, { events: turnedOffEvents(turnedOff) }),
      schema,
    });
    const keys = Array.from({ length: 64 }, (_, i) => `k-${i}`);
    const run = (key: string) =>
      idem.run({ tenant: 'acme', operation: 'op', key, request: { key } }, async () => key);
    await Promise.all(keys.map(run));
    const replays = await Promise.all(keys.map(run));
    expect(replays.every((r) => r.replayed)).toBe(true);
    expect(turnedOff).toEqual([]);
  });

  it('delivers notifications to a LISTEN through it: the self-test passes and events are woken', async () => {
    const errors: unknown[] = [];
    const published: string[] = [];
    const sql = fromPg(pool);
    const events = createEvents();
    events.on('error', ({ error }) => errors.push(error));
    const dispatcher = createOutboxDispatcher({
      sql,
      schema,
      publisher: {
        publish: async (events: readonly OutboxEvent[]) => {
          published.push(...events.map((e) => e.id));
          return events.map((e): PublishResult => ({ id: e.id, ok: true }));
        },
      },
      listen: bouncer.url,
      pollIntervalMs: 60_000, // only a notification can wake it within the test
      listenSelfTestTimeoutMs: 1000,
      events,
    });
    await dispatcher.start();
    try {
      const id = await sql.transaction((tx) =>
        createOutbox({ sql, schema }).add(tx, { topic: 't', key: 'k', type: 'x', payload: {} }),
      );
      await until(
        async () => published.includes(id),
        (done) => done,
        5000,
      );
      expect(published).toContain(id);
      await new Promise((resolve) => setTimeout(resolve, 1200)); // past the self-test's bound
      expect(errors).toEqual([]);
      expect(dispatcher.wakeups).toBe('listening');
    } finally {
      await dispatcher.stop();
    }
  });
});
