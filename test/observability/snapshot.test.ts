/**
 * "Stuck" has one definition: the console's summary, the Prometheus gauges and the outbox's stats
 * read one snapshot (src/observability/snapshot.ts), on the clock they are given, so they agree on
 * every count, and a lease that lapses on the application's clock is stuck on every screen at once.
 */
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { consolePlugin } from 'idem/console';
import { createIdemMetrics } from 'idem/metrics';
import { createIdem } from 'idem';
import { createOutbox } from 'idem/outbox';
import { createManualClock } from 'idem/testing';
import { createTestSchema, type TestSchema } from '../support/database.js';

describe('one snapshot: the console, Prometheus and stats agree', () => {
  let db: TestSchema;
  beforeAll(async () => {
    db = await createTestSchema();
  });
  afterAll(() => db.close());

  const gauge = (text: string, name: string) =>
    Number(new RegExp(`^idem_${name} (\\S+)$`, 'm').exec(text)?.[1]);

  it('counts a lapsed lease as stuck on the injected clock, in the console and the gauges alike', async () => {
    // An hour ahead of the database's clock: a reader on now() would see no lease lapse.
    const clock = createManualClock({ startMs: Date.now() + 3_600_000 });
    const sql = fromPg(db.pool);
    const idem = createIdem({ sql, schema: db.schema, clock, leaseMs: 1000 });
    const outbox = createOutbox({ schema: db.schema, sql, clock });
    const app = Fastify({ logger: false });
    await app.register(consolePlugin, { pool: db.pool, schema: db.schema, host: '127.0.0.1', clock });
    await app.ready();
    const summary = async () => {
      const response = await app.inject({ url: '/console/api/summary', remoteAddress: '127.0.0.1' });
      expect(response.statusCode, response.body).toBe(200);
      return response.json<{
        requests: { pending: number; stuck: number };
        outbox: { backlog: number; lagMs: number | null };
      }>();
    };
    const metrics = createIdemMetrics({ sql, schema: db.schema, clock });
    const read = async () => ({
      summary: await summary(),
      text: await metrics.render(),
      stats: await outbox.stats(),
    });

    // A multi-step operation between two steps: pending, its lease held until the clock passes it.
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let reserved!: () => void;
    const atGate = new Promise<void>((resolve) => (reserved = resolve));
    const running = idem
      .steps(
        { tenant: 'acme', operation: 'ship-order', key: 'ship-1', request: { order: 1 } },
        async (op) => {
          await op.step('reserve', async () => 1);
          reserved();
          await gate;
          return 'shipped';
        },
      )
      .catch((error: unknown) => error);
    await atGate;
    await sql.transaction((tx) =>
      outbox.add(tx, { tenant: 'acme', topic: 'order', key: 'o-1', type: 'order.shipped', payload: {} }),
    );

    const before = await read();
    expect(before.summary.requests).toEqual({ pending: 1, stuck: 0 });
    expect(gauge(before.text, 'requests_stuck')).toBe(0);
    expect(before.summary.outbox.backlog).toBe(1);
    expect(gauge(before.text, 'outbox_backlog')).toBe(1);
    expect(before.stats.pending).toBe(1);

    clock.advance(1001); // the lease lapses on the application's clock, not the database's
    await new Promise((resolve) => setTimeout(resolve, 150)); // the gauges share one read per 100 ms
    const after = await read();
    expect(after.summary.requests).toEqual({ pending: 1, stuck: 1 });
    expect(gauge(after.text, 'requests_stuck')).toBe(1);
    // The outbox's lag is measured on the same clock: at least the 1001 ms the clock moved.
    expect(after.summary.outbox.lagMs).toBeGreaterThanOrEqual(1001);
    expect(gauge(after.text, 'outbox_lag_seconds')).toBeCloseTo(after.summary.outbox.lagMs! / 1000, 0);
    expect(after.stats.oldestPendingAgeMs).toBe(after.summary.outbox.lagMs);

    release();
    await running;
    await app.close();
  });
});
