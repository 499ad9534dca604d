/**
 * Multi-step operations with a slow external call: 40 operations at once, each with one call that
 * takes 500 ms at a real HTTP provider, on a `pg` pool of 8, while another task runs `SELECT 1` on
 * the same pool every 20 ms. Side by side, alternating: the call made inside a step's transaction
 * (how `op.step` ran every step before `op.call` existed) and the same call as `op.call` (no
 * transaction, no pooled connection held while it runs).
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import pg from 'pg';
import { fromPg } from '../src/adapters/pg.js';
import { migrate } from '../src/migrate/migrate.js';
import { createIdem, type Idem } from '../src/operations/idem.js';
import { round } from './lib/measure.js';
import { listenOnLoopback } from './lib/loopback.js';
import type { BenchContext, BenchFigure, BenchSection } from './lib/types.js';

const operations = 40;
const poolSize = 8;
const callMs = 500;

interface Burst {
  /** From the first operation started to the last one done. */
  totalMs: number;
  /** The longest `SELECT 1` on the same pool, waiting for a connection included. */
  longestSelect1Ms: number;
  /** The most sessions of the pool seen `idle in transaction` at once (sampled every 25 ms). */
  idleInTransaction: number;
}

export default async function stepsBench(ctx: BenchContext): Promise<BenchSection> {
  const schema = `idem_bench_steps_${randomBytes(3).toString('hex')}`;
  const applicationName = `idem-bench-steps-${randomBytes(3).toString('hex')}`;
  const pool = new pg.Pool({
    connectionString: ctx.databaseUrl,
    max: poolSize,
    application_name: applicationName,
  });
  const observer = new pg.Client({ connectionString: ctx.databaseUrl });
  await observer.connect();
  const provider = await startProvider(callMs);
  const sql = fromPg(pool);
  await migrate(sql, { schema });
  const idem = createIdem({ sql, schema });
  const rounds = ctx.quick ? 1 : 5;
  const run = randomBytes(3).toString('hex');
  let burstNo = 0;

  const charge = async (key: string, signal?: AbortSignal) => {
    const response = await fetch(provider.url, {
      method: 'POST',
      headers: { 'idempotency-key': key },
      ...(signal ? { signal } : {}),
    });
    return (await response.json()) as { id: string };
  };

  async function burst(kind: 'in-transaction' | 'call'): Promise<Burst> {
    const label = `${run}-${burstNo++}`;
    let longest = 0;
    let idle = 0;
    let running = true;
    const probe = (async () => {
      while (running) {
        const started = performance.now();
        await pool.query('SELECT 1');
        longest = Math.max(longest, performance.now() - started);
        await sleep(20);
      }
    })();
    const sessions = (async () => {
      while (running) {
        const { rows } = await observer.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'`,
          [applicationName],
        );
        idle = Math.max(idle, rows[0]!.n);
        await sleep(25);
      }
    })();
    const started = performance.now();
    await Promise.all(
      Array.from({ length: operations }, (_, i) =>
        idem.steps({ tenant: 'acme', operation: 'pay', key: `${label}-${i}` }, (op) =>
          kind === 'call'
            ? op.call('charge', ({ key, signal }) => charge(key, signal))
            : op.step('charge', (_tx, { key }) => charge(key)),
        ),
      ),
    );
    const totalMs = performance.now() - started;
    running = false;
    await Promise.all([probe, sessions]);
    return { totalMs, longestSelect1Ms: longest, idleInTransaction: idle };
  }

  try {
    await warmUp(pool, idem, provider.url);
    const inTransaction: Burst[] = [];
    const calls: Burst[] = [];
    for (let r = 0; r < rounds; r++) {
      ctx.log(
        `steps: round ${r + 1}/${rounds}: 40 × ${callMs} ms, inside a step's transaction, then as calls`,
      );
      inTransaction.push(await burst('in-transaction'));
      calls.push(await burst('call'));
    }
    const before = medianBurst(inTransaction);
    const after = medianBurst(calls);
    const baseline = 'the call inside a step transaction';
    const figures: BenchFigure[] = [
      {
        name: `${operations} operations × one ${callMs} ms call, pool of ${poolSize}: all done`,
        value: round(after.totalMs, 0),
        unit: 'ms',
        baseline: { name: baseline, value: round(before.totalMs, 0) },
        ratio: round(before.totalMs / after.totalMs),
        higherIsBetter: false,
        target: { max: 1500, description: '< 1500 ms' },
        holds: after.totalMs < 1500,
      },
      {
        name: 'longest concurrent SELECT 1 on the same pool',
        value: round(after.longestSelect1Ms, 1),
        unit: 'ms',
        baseline: { name: baseline, value: round(before.longestSelect1Ms, 1) },
        ratio: round(before.longestSelect1Ms / after.longestSelect1Ms),
        higherIsBetter: false,
        target: { max: 50, description: '< 50 ms' },
        holds: after.longestSelect1Ms < 50,
      },
      {
        name: 'sessions idle in transaction during the calls (most at once)',
        value: after.idleInTransaction,
        unit: 'sessions',
        baseline: { name: baseline, value: before.idleInTransaction },
        target: { max: 0, description: 'none' },
        holds: after.idleInTransaction === 0,
      },
    ];
    for (const f of figures) {
      ctx.log(`  ${f.name}: ${f.value} ${f.unit} vs ${f.baseline!.value} ${f.unit} (${baseline})`);
    }
    return {
      name: 'steps',
      figures,
      notes: [
        `Each figure is the median of ${rounds} bursts per side, alternating; the pool is warm (every connection open, statements prepared) before the first.`,
        'Inside a step, each call holds a pooled connection, an open transaction and the operation row lock for its whole 500 ms: the pool runs the calls 8 at a time and everything else on the pool queues behind them.',
        'As a call, an operation uses the pool for four short statements (claim, start the call, record it, complete) and none while the provider answers.',
      ],
    };
  } finally {
    await provider.close();
    await observer.end();
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  }
}

/** Every connection open, idem's statements prepared on them, the code paths compiled. */
async function warmUp(pool: pg.Pool, idem: Idem, url: string): Promise<void> {
  const clients = await Promise.all(Array.from({ length: poolSize }, () => pool.connect()));
  for (const client of clients) client.release();
  const run = randomBytes(3).toString('hex');
  await Promise.all(
    Array.from({ length: poolSize * 2 }, (_, i) =>
      idem.steps({ tenant: 'acme', operation: 'warm-up', key: `${run}-${i}` }, async (op) => {
        await op.step('local', async (tx) => (await tx.query('SELECT 1')).rowCount);
        return op.call('charge', async ({ key }) => {
          const response = await fetch(`${url}?fast=1`, {
            method: 'POST',
            headers: { 'idempotency-key': key },
          });
          return (await response.json()) as { id: string };
        });
      }),
    ),
  );
}

/** A provider that answers every call after `latencyMs` (`?fast=1`: at once). */
async function startProvider(latencyMs: number): Promise<{ url: string; close(): Promise<void> }> {
  let charges = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const answer = () =>
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ id: `ch_${++charges}` }));
      if (req.url?.includes('fast=1')) answer();
      else setTimeout(answer, latencyMs);
    });
  });
  return listenOnLoopback(server);
}

function medianBurst(bursts: Burst[]): Burst {
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  return {
    totalMs: median(bursts.map((b) => b.totalMs)),
    longestSelect1Ms: median(bursts.map((b) => b.longestSelect1Ms)),
    idleInTransaction: median(bursts.map((b) => b.idleInTransaction)),
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
