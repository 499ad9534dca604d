/**
 * What recording causation costs (migration 0011, docs/trace.md): idem as it is, side by side with
 * idem as it was before causation was recorded (the commit before it, extracted into
 * bench/.causation-before/ and imported from there), on the same PostgreSQL, the same pool, in
 * alternating rounds. Three figures: a keyed first execution (its row gains `caused_by` and
 * `traceparent`), a multi-step first execution (each step's row gains its derived key and trace
 * context), and outbox dispatch of events written inside an intent (each row gains `intent`,
 * `traceparent` and the two headers the publisher passes on). The target: within 3 % of before.
 *
 * "Before" is the whole tree of that commit, so the figure is the cost of everything since, not of
 * causation alone: an upper bound of what causation costs.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { fromPg } from '../src/adapters/pg.js';
import { onBehalfOf } from '../src/core/causation.js';
import { migrate } from '../src/migrate/migrate.js';
import { createIdem } from '../src/operations/idem.js';
import { createOutboxDispatcher } from '../src/outbox/dispatcher.js';
import { createOutbox } from '../src/outbox/outbox.js';
import type { Publisher, PublishResult } from '../src/outbox/types.js';
import { closedLoop, round, sideBySide, type LoadResult } from './lib/measure.js';
import type { BenchContext, BenchFigure, BenchSection } from './lib/types.js';

/** The last commit before causation was recorded (its parent is fe6daf7, migration 0011). */
const beforeCommit = '013fb87';
const beforeDir = fileURLToPath(new URL('./.causation-before/', import.meta.url));

const noop: Publisher = {
  name: 'no-op',
  publish: async (events) => events.map((e): PublishResult => ({ id: e.id, ok: true })),
};

/** The parts of idem each side is measured with: the same names, from its own tree. */
interface Build {
  fromPg: typeof fromPg;
  migrate: typeof migrate;
  createIdem: typeof createIdem;
  createOutbox: typeof createOutbox;
  createOutboxDispatcher: typeof createOutboxDispatcher;
}

/** idem's tree at `beforeCommit` (its src/, migrations/ and package.json), imported from there. */
async function loadBefore(): Promise<Build> {
  if (!existsSync(`${beforeDir}src`)) {
    mkdirSync(beforeDir, { recursive: true });
    // git archive, not a worktree: nothing to register or clean up; node_modules resolve upward.
    const tar = `${beforeDir}tree.tar`;
    execFileSync('git', ['archive', '-o', tar, beforeCommit, 'src', 'migrations', 'package.json']);
    execFileSync('tar', ['-x', '-f', tar, '-C', beforeDir]);
  }
  // Typed as today's modules: the names and shapes these five have kept.
  const at = <Module>(path: string) => import(new URL(path, `file://${beforeDir}`).href) as Promise<Module>;
  return {
    fromPg: (await at<typeof import('../src/adapters/pg.js')>('src/adapters/pg.ts')).fromPg,
    migrate: (await at<typeof import('../src/migrate/migrate.js')>('src/migrate/migrate.ts')).migrate,
    createIdem: (await at<typeof import('../src/operations/idem.js')>('src/operations/idem.ts')).createIdem,
    createOutbox: (await at<typeof import('../src/outbox/outbox.js')>('src/outbox/outbox.ts')).createOutbox,
    createOutboxDispatcher: (
      await at<typeof import('../src/outbox/dispatcher.js')>('src/outbox/dispatcher.ts')
    ).createOutboxDispatcher,
  };
}

const now: Build = { fromPg, migrate, createIdem, createOutbox, createOutboxDispatcher };

export default async function causationBench(ctx: BenchContext): Promise<BenchSection> {
  const before = await loadBefore();
  const tag = randomBytes(3).toString('hex');
  // One pool in pipeline mode for both sides (what docs/operations/deployment.md recommends).
  const pool = new pg.Pool({ connectionString: ctx.databaseUrl, max: 32, pipeline: true });
  const seconds = ctx.quick ? 2 : 4;
  const rounds = ctx.quick ? 3 : 7;
  const c = 32;
  let calls = 0;
  /** Each side's WAL bytes per event of its last drain. */
  const walPerEvent = new Map<string, number>();

  /** One side: its schema, migrated by its own migrations, and its parts on the shared pool. */
  async function side(build: Build, name: string) {
    const schema = `idem_bench_cause_${name}_${tag}`;
    const sql = build.fromPg(pool);
    await build.migrate(sql, { schema });
    await pool.query(`CREATE TABLE "${schema}".items (id bigserial PRIMARY KEY, amount int NOT NULL)`);
    const insert = `INSERT INTO "${schema}".items (amount) VALUES ($1) RETURNING id`;
    const idem = build.createIdem({ sql, schema });
    const outbox = build.createOutbox({ sql, schema, notify: false });
    const key = (label: string, w: number) => `${tag}-${label}-${w}-${calls++}`;
    return {
      schema,
      firstExecution: () =>
        closedLoop(c, seconds * 1000, (w) =>
          idem.run(
            { tenant: 'acme', operation: 'create-item', key: key('run', w), request: { amount: 1 } },
            async (tx) => (await tx.query(insert, [1])).rows[0],
          ),
        ),
      // local step, call, local step: the flow of the demo's payment, without the provider's wait.
      steps: () =>
        closedLoop(c, seconds * 1000, (w) =>
          idem.steps(
            { tenant: 'acme', operation: 'pay', key: key('steps', w), request: { amount: 1 } },
            async (op) => {
              await op.step('record', async (tx) => (await tx.query(insert, [1])).rows[0]);
              const charged = await op.call('charge', ({ key: callKey }) => Promise.resolve({ callKey }));
              await op.step('settle', async (tx) => (await tx.query(insert, [2])).rows[0]);
              return charged;
            },
          ),
        ),
      /**
       * Fills `count` events, ten per intent (`inIntent(n, fn)` runs `fn` inside intent n), then
       * times one dispatcher draining them.
       */
      dispatch: async (count: number, inIntent: <T>(n: number, fn: () => T) => T): Promise<LoadResult> => {
        await pool.query(`TRUNCATE "${schema}".outbox`);
        const event = (n: number) => ({
          tenant: 'acme',
          topic: 'bench',
          key: `order-${n % 1000}`,
          type: 'order.updated',
          payload: { orderId: `order-${n % 1000}`, seq: n, amount: 1250 },
        });
        for (let done = 0; done < count; done += 1000) {
          await sql.transaction(async (tx) => {
            for (let first = done; first < Math.min(done + 1000, count); first += 10) {
              const events = Array.from({ length: Math.min(10, count - first) }, (_, i) => event(first + i));
              await inIntent(first / 10, () => outbox.addMany(tx, events));
            }
          });
        }
        await pool.query(`ANALYZE "${schema}".outbox`);
        // The fill's WAL is flushed to the data files before the drain is timed, so a checkpoint
        // it starts does not land in either side's drain (per-round figures varied ±25 % without).
        await pool.query('CHECKPOINT');
        const dispatcher = build.createOutboxDispatcher({ sql, publisher: noop, schema, topics: ['bench'] });
        const { rows: at } = await pool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
        const started = performance.now();
        await dispatcher.drain({ maxBatches: 1_000_000 });
        const elapsed = (performance.now() - started) / 1000;
        // WAL the drain wrote (every side's only writer then): the width of what causation adds,
        // copied by each published mark, without the ±25 % of a single drain's commit latency.
        const { rows: wal } = await pool.query<{ bytes: string }>(
          'SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::text AS bytes',
          [at[0]!.lsn],
        );
        walPerEvent.set(name, Number(wal[0]!.bytes) / count);
        const { rows } = await pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM "${schema}".outbox WHERE published_at IS NULL`,
        );
        if (rows[0]!.n !== 0) throw new Error(`${rows[0]!.n} events left unpublished`);
        return { ops: count, seconds: elapsed, opsPerSecond: count / elapsed, p50Ms: NaN, p99Ms: NaN };
      },
    };
  }

  const was = await side(before, 'before');
  const is = await side(now, 'now');
  const figures: BenchFigure[] = [];
  const target = 0.97;
  const add = (name: string, [then, today]: [LoadResult, LoadResult], unit: string) => {
    const ratio = today.opsPerSecond / then.opsPerSecond;
    figures.push({
      name,
      value: round(today.opsPerSecond, 0),
      unit,
      baseline: { name: `idem before causation (${beforeCommit})`, value: round(then.opsPerSecond, 0) },
      ratio: round(ratio),
      higherIsBetter: true,
      target: { ratio: target, description: `≥ ${target}× before causation (within 3 %)` },
      holds: ratio >= target,
    });
    ctx.log(
      `  ${name}: ${round(today.opsPerSecond, 0)} vs ${round(then.opsPerSecond, 0)} ${unit} (${round(ratio)}×)`,
    );
  };

  try {
    ctx.log('causation: warm-up');
    for (const s of [was, is]) {
      await s.firstExecution();
      await s.steps();
    }
    ctx.log(`causation: keyed first executions, c=${c}, ${rounds} alternating rounds of ${seconds} s`);
    add(
      `keyed first execution (default), c=${c}`,
      await sideBySide(rounds, was.firstExecution, is.firstExecution),
      'ops/s',
    );
    ctx.log(`causation: multi-step first executions (local, call, local), c=${c}`);
    add(
      `multi-step first execution (local, call, local), c=${c}`,
      await sideBySide(rounds, was.steps, is.steps),
      'ops/s',
    );
    const events = ctx.quick ? 10_000 : 30_000;
    const order = (n: number) => ({ tenant: 'acme', operation: 'create-order', key: `order-${tag}-${n}` });
    ctx.log(`causation: dispatch of ${events} events written inside intents (ten each), no-op publisher`);
    add(
      `outbox dispatch of ${events} events written inside intents, ten each (no-op publisher)`,
      await sideBySide(
        ctx.quick ? 2 : 8,
        // Before causation nothing names the intent: the same events, written the same way.
        () => was.dispatch(events, (_n, fn) => fn()),
        () => is.dispatch(events, (n, fn) => onBehalfOf(order(n), fn)),
        { alternate: true },
      ),
      'events/s',
    );
    const [walBefore, walNow] = [walPerEvent.get('before')!, walPerEvent.get('now')!];
    figures.push({
      name: 'WAL written per event dispatched (the drain of the figure above)',
      value: round(walNow, 0),
      unit: 'bytes',
      baseline: { name: `idem before causation (${beforeCommit})`, value: round(walBefore, 0) },
      ratio: round(walNow / walBefore),
      higherIsBetter: false,
    });
    ctx.log(`  WAL per event dispatched: ${round(walNow, 0)} vs ${round(walBefore, 0)} bytes`);
  } finally {
    for (const s of [was, is]) await pool.query(`DROP SCHEMA IF EXISTS "${s.schema}" CASCADE`);
    await pool.end();
  }
  return {
    name: 'Causation',
    figures,
    notes: [
      `Before: idem at commit ${beforeCommit}, the last before causation was recorded, extracted with git archive into bench/.causation-before/ and imported from there; now: the working tree. Both on one node-postgres pool of 32 in pipeline mode, each in its own schema migrated by its own migrations, alternating round by round (${rounds} rounds of ${seconds} s for the first executions; median kept).`,
      'What causation adds to a first execution: an AsyncLocalStorage read and an active-span lookup where the INSERT builds its parameters, and two more parameters in statements idem already sends (no extra round trip). To dispatch: two more columns read per event, merged into the headers passed to the publisher (kept out of the stored headers: copied there too, each row was 48 bytes wider and the drain wrote 1,129 WAL bytes per event instead of 1,022, measured side by side), and a hash-index entry on `intent` that each published mark writes again.',
      `Dispatch: ${ctx.quick ? 2 : 8} drains a side, in ABBA order (odd rounds run "now" first), each after a CHECKPOINT that follows its fill; median kept. Single drains of 30,000 events vary by ±25 % on this machine (commit latency), so one run's ratio is within a few per cent of noise either way.`,
      'No tracer provider is registered (the common case without OpenTelemetry): the traceparent written is null and the intent reference is the only new value.',
    ],
  };
}
