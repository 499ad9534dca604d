/**
 * Poolers: what named prepared statements buy on a direct connection (the reason `prepare` exists),
 * what a transaction-mode PgBouncer costs, and commit → publish latency through PgBouncer with the
 * dispatcher's LISTEN on a direct URL. PgBouncer is started by this module (test/support/pgbouncer);
 * without it only the direct figures are measured.
 */
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import postgres from 'postgres';
import { fromPg } from '../src/adapters/pg.js';
import { fromPostgresJs } from '../src/adapters/postgres.js';
import type { Sql } from '../src/core/sql.js';
import { migrate } from '../src/migrate/migrate.js';
import { createIdem, type Idem } from '../src/operations/idem.js';
import { createOutboxDispatcher } from '../src/outbox/dispatcher.js';
import { createOutbox } from '../src/outbox/outbox.js';
import type { OutboxEvent, Publisher, PublishResult } from '../src/outbox/types.js';
import { findPgBouncer, startPgBouncer, type PgBouncer } from '../test/support/pgbouncer.js';
import { closedLoop, percentiles, round, sideBySide, type LoadResult } from './lib/measure.js';
import type { BenchContext, BenchFigure, BenchSection } from './lib/types.js';

export default async function poolerBench(ctx: BenchContext): Promise<BenchSection> {
  const schema = `idem_bench_pool_${randomBytes(3).toString('hex')}`;
  // Quick mode keeps the suite under 3 minutes: pg's figures and the latency through the pooler only.
  const seconds = ctx.quick ? 2 : 8;
  const rounds = ctx.quick ? 1 : 3;
  const concurrency = 32;
  const figures: BenchFigure[] = [];
  const notes: string[] = [];
  const run = `r${randomBytes(3).toString('hex')}`;

  const direct = new pg.Pool({ connectionString: ctx.databaseUrl, max: concurrency + 2 });
  const prepared = fromPg(direct, { prepare: true });
  const unprepared = fromPg(direct, { prepare: false });
  await migrate(prepared, { schema });
  const insertItem = `INSERT INTO "${schema}".items (tenant, amount) VALUES ($1, $2) RETURNING id`;
  await direct.query(
    `CREATE TABLE "${schema}".items (id bigserial PRIMARY KEY, tenant text NOT NULL, amount int NOT NULL)`,
  );

  // A key never used before: closedLoop counts from 0 in every run, and a key built from that
  // came back in the next round, where a first execution became a replay.
  let calls = 0;
  const firstExecutions = (idem: Idem, label: string) => () =>
    closedLoop(concurrency, seconds * 1000, (w) =>
      idem.run(
        {
          tenant: 'acme',
          operation: 'create-item',
          key: `${run}-${label}-${w}-${calls++}`,
          request: { amount: 1 },
        },
        async (tx) => (await tx.query(insertItem, ['acme', 1])).rows[0],
      ),
    );
  const replayKeys = 1000;
  const replays = (idem: Idem) => () =>
    closedLoop(concurrency, seconds * 1000, (_w, i) =>
      idem.run(
        {
          tenant: 'acme',
          operation: 'create-item',
          key: `${run}-replay-${i % replayKeys}`,
          request: { amount: 1 },
        },
        async () => {
          throw new Error('a replay must not run the handler');
        },
      ),
    );
  const compare = (name: string, value: LoadResult, base: LoadResult, baseName: string) => {
    figures.push({
      name,
      value: round(value.opsPerSecond, 0),
      unit: 'ops/s',
      baseline: { name: baseName, value: round(base.opsPerSecond, 0) },
      ratio: round(value.opsPerSecond / base.opsPerSecond),
      higherIsBetter: true,
    });
    ctx.log(
      `  ${name}: ${round(value.opsPerSecond, 0)} vs ${round(base.opsPerSecond, 0)} ops/s (${round(value.opsPerSecond / base.opsPerSecond)}×), p99 ${round(value.p99Ms)} vs ${round(base.p99Ms)} ms`,
    );
  };

  // 1. Named prepared statements on a direct connection, side by side in alternating rounds.
  const idemPrepared = createIdem({ sql: prepared, schema });
  const idemUnprepared = createIdem({ sql: unprepared, schema });
  for (let k = 0; k < replayKeys; k++) {
    await idemPrepared.run(
      { tenant: 'acme', operation: 'create-item', key: `${run}-replay-${k}`, request: { amount: 1 } },
      async (tx) => (await tx.query(insertItem, ['acme', 1])).rows[0],
    );
  }
  ctx.log(`pooler: named statements on a direct connection, first executions, c=${concurrency}`);
  const [firstOff, firstOn] = await sideBySide(
    rounds,
    firstExecutions(idemUnprepared, 'off'),
    firstExecutions(idemPrepared, 'on'),
  );
  compare(`first execution, prepare on, c=${concurrency}`, firstOn, firstOff, 'prepare off');
  ctx.log(`pooler: named statements on a direct connection, replays, c=${concurrency}`);
  const [replayOff, replayOn] = await sideBySide(rounds, replays(idemUnprepared), replays(idemPrepared));
  compare(`replay, prepare on, c=${concurrency}`, replayOn, replayOff, 'prepare off');

  // The same on postgres.js, whose unprepared statements with parameters cost an extra round trip
  // (it describes them first).
  if (!ctx.quick) {
    const pgjs = postgres(ctx.databaseUrl, { max: concurrency + 2, onnotice: () => undefined });
    try {
      const pgjsOn = createIdem({ sql: fromPostgresJs(pgjs, { prepare: true }), schema });
      const pgjsOff = createIdem({ sql: fromPostgresJs(pgjs, { prepare: false }), schema });
      ctx.log(`pooler: named statements on postgres.js, first executions and replays, c=${concurrency}`);
      const [jsFirstOff, jsFirstOn] = await sideBySide(
        rounds,
        firstExecutions(pgjsOff, 'js-off'),
        firstExecutions(pgjsOn, 'js-on'),
      );
      compare(
        `postgres.js first execution, prepare on, c=${concurrency}`,
        jsFirstOn,
        jsFirstOff,
        'prepare off',
      );
      const [jsReplayOff, jsReplayOn] = await sideBySide(rounds, replays(pgjsOff), replays(pgjsOn));
      compare(`postgres.js replay, prepare on, c=${concurrency}`, jsReplayOn, jsReplayOff, 'prepare off');
    } finally {
      await pgjs.end();
    }
  }

  const binary = findPgBouncer();
  let bouncer: PgBouncer | undefined;
  if (!binary) {
    notes.push('pgbouncer is not installed: the figures through PgBouncer were not measured.');
  } else {
    bouncer = await startPgBouncer(binary, { targetUrl: ctx.databaseUrl, poolSize: 20 });
    const pooled = new pg.Pool({ connectionString: bouncer.url, max: concurrency + 2 });
    try {
      const idemPooled = createIdem({ sql: fromPg(pooled, { prepare: false }), schema });
      // 2. What the pooler costs: the same first executions, through PgBouncer vs direct (both
      // without named statements, the only way PgBouncer 1.18 in transaction mode runs them).
      if (!ctx.quick) {
        ctx.log(`pooler: first executions through PgBouncer (transaction mode) vs direct, c=${concurrency}`);
        const [viaDirect, viaPooler] = await sideBySide(
          rounds,
          firstExecutions(idemUnprepared, 'direct'),
          firstExecutions(idemPooled, 'pooled'),
        );
        compare(
          `first execution through PgBouncer, c=${concurrency}`,
          viaPooler,
          viaDirect,
          'direct, prepare off',
        );
      }
      // 3. Commit → publish through the pooler, the dispatcher woken by LISTEN on a direct URL,
      // beside the same run with everything direct (the messaging section's path at this rate).
      const viaDirectLatency = ctx.quick
        ? undefined
        : await commitToPublish(ctx, schema, unprepared, ctx.databaseUrl, 'direct');
      const baseline = (value: number | undefined) =>
        value === undefined ? {} : { baseline: { name: 'all direct', value: round(value, 1) } };
      const viaPoolerLatency = await commitToPublish(
        ctx,
        schema,
        fromPg(pooled, { prepare: false }),
        bouncer.url,
        'through PgBouncer',
      );
      figures.push(
        {
          name: 'commit → publish p50 through PgBouncer (LISTEN direct), 200 events/s',
          value: round(viaPoolerLatency.p50Ms, 1),
          unit: 'ms',
          ...baseline(viaDirectLatency?.p50Ms),
          higherIsBetter: false,
        },
        {
          name: 'commit → publish p99 through PgBouncer (LISTEN direct), 200 events/s',
          value: round(viaPoolerLatency.p99Ms, 1),
          unit: 'ms',
          ...baseline(viaDirectLatency?.p99Ms),
          higherIsBetter: false,
          target: { max: 50, description: '≤ 50 ms' },
          holds: viaPoolerLatency.p99Ms <= 50,
        },
      );
    } finally {
      await pooled.end();
      await bouncer.stop();
    }
  }
  await direct.query(`DROP SCHEMA "${schema}" CASCADE`);
  await direct.end();
  notes.push(
    `Load average while measuring: ${os
      .loadavg()
      .map((l) => l.toFixed(1))
      .join(' / ')} (1 / 5 / 15 min) on ${os.cpus().length} cores shared with other work.`,
    `Named statements: idem.run, ${concurrency} workers, one INSERT per handler, prepare on and off on the same pool, ${rounds} alternating round(s) of ${seconds} s each (median kept); the machine is shared, so only the side-by-side ratio means anything. What they save is the server's planning of the claim (a CTE with set_config) and of the replay read on every call; postgres.js without them also describes each statement in an extra round trip.`,
    'Through PgBouncer 1.18 in transaction mode named statements cannot be used at all (each transaction may land on another server connection): the pooler figure is with prepare off on both sides, so it is the cost of the extra hop alone. PgBouncer also caps the server connections (20 here, against 34 direct): on a saturated machine fewer busy backends can make the pooled side the faster one (measured 0.92× at load 0.4, 1.54× at load 12).',
    ...(ctx.quick ? ['Quick mode: pg only, no PgBouncer throughput, no all-direct latency baseline.'] : []),
    `Commit → publish: one transaction per event through PgBouncer at a fixed rate, the dispatcher's batches through PgBouncer too and its LISTEN on a direct connection (poll backstop 1 s), from the producer's COMMIT returning to the publisher being called.`,
  );
  return { name: 'Poolers', figures, notes };
}

/**
 * Producers commit one event per transaction on `sql` at a fixed rate; a dispatcher whose batches
 * run on `dispatcherUrl` is woken by LISTEN on a direct connection.
 */
async function commitToPublish(
  ctx: BenchContext,
  schema: string,
  sql: Sql,
  dispatcherUrl: string,
  label: string,
): Promise<{ p50Ms: number; p99Ms: number }> {
  const rate = 200;
  const latencySeconds = ctx.quick ? 3 : 10;
  const topic = `latency-${label.replace(/\W/g, '')}`;
  ctx.log(`pooler: commit → publish, ${label}, at ${rate} events/s for ${latencySeconds} s`);
  const committedAt = new Map<string, number>();
  const publishedAt = new Map<string, number>();
  const recorder: Publisher = {
    publish: async (batch: readonly OutboxEvent[]) => {
      const now = performance.now();
      for (const e of batch) if (!publishedAt.has(e.id)) publishedAt.set(e.id, now);
      return batch.map((e): PublishResult => ({ id: e.id, ok: true }));
    },
  };
  const outbox = createOutbox({ sql, schema });
  const dispatcherPool = new pg.Pool({ connectionString: dispatcherUrl, max: 2 });
  const dispatcher = createOutboxDispatcher({
    sql: fromPg(dispatcherPool, { prepare: false }),
    publisher: recorder,
    schema,
    topics: [topic],
    listen: ctx.databaseUrl,
  });
  await dispatcher.start();
  try {
    await sleep(100);
    const total = rate * latencySeconds;
    const producing: Promise<void>[] = [];
    const started = performance.now();
    for (let i = 0; i < total; i++) {
      const wait = started + (i * 1000) / rate - performance.now();
      if (wait > 0) await sleep(wait);
      producing.push(
        sql
          .transaction((tx) =>
            outbox.add(tx, {
              topic,
              key: `order-${i % 100}`,
              type: 'order.updated',
              payload: { i },
            }),
          )
          .then((id) => void committedAt.set(id, performance.now())),
      );
    }
    await Promise.all(producing);
    const deadline = performance.now() + 30_000;
    while (publishedAt.size < total && performance.now() < deadline) await sleep(10);
  } finally {
    await dispatcher.stop();
    await dispatcherPool.end();
  }
  const latencies = [...committedAt].map(([id, at]) => Math.max(0, (publishedAt.get(id) ?? Infinity) - at));
  const result = percentiles(latencies);
  ctx.log(
    `  p50 ${round(result.p50Ms, 1)} ms, p99 ${round(result.p99Ms, 1)} ms over ${latencies.length} events`,
  );
  return result;
}
