/**
 * Peers: keyed operations side by side with the libraries people would otherwise use, wrapped
 * around the same handler (a transaction inserting one order row), in the same process, against
 * the same PostgreSQL and Redis. Throughput of first executions and replays, then the duplicate-
 * effect drills: 100 concurrent identical requests, a request that fails after its write, a process
 * killed after its write, and a transient failure before any write.
 */
import { round, type LoadResult } from './lib/measure.js';
import type { BenchContext, BenchFigure, BenchSection } from './lib/types.js';
import {
  concurrencyDrill,
  crashDrill,
  duplicatesOf,
  failureDrill,
  type DrillResult,
} from './peers/drills.js';
import { createPeerEnvironment, defaultRedisUrl } from './peers/environment.js';
import { firstExecutions, prefill, replays, rotate, type Contender } from './peers/throughput.js';
import type { Variant } from './peers/variant.js';
import { variants } from './peers/variants/index.js';

const concurrency = 32;
const warmUpMs = 300;

export default async function peersBench(ctx: BenchContext): Promise<BenchSection> {
  const started = Date.now();
  const seconds = ctx.quick ? 1.5 : 5;
  const rounds = ctx.quick ? 1 : 3;
  const replayKeys = ctx.quick ? 200 : 1000;
  const redisUrl = ctx.redisUrl ?? defaultRedisUrl;
  const env = await createPeerEnvironment({
    databaseUrl: ctx.databaseUrl,
    redisUrl,
    poolSize: concurrency + 2,
  });
  const figures: BenchFigure[] = [];
  const notes: string[] = [];
  try {
    // ---- throughput -------------------------------------------------------------------------
    for (const layout of ['function', 'http'] as const) {
      const members = variants.filter((v) => v.layout === layout);
      const contenders: Contender[] = [];
      for (const variant of members) {
        contenders.push({ variant, running: await variant.start({ env, clientConnections: concurrency }) });
      }
      try {
        const [plainOne, idemOne] = contenders;
        // Warm-up: opens every pool connection and socket and prepares statements, so the contender
        // measured first does not pay for them.
        await rotate(1, contenders, firstExecutions(concurrency, warmUpMs, `${env.namespace}-warm`));
        ctx.log(`peers: first executions, ${layout} layout, c=${concurrency}`);
        const firsts = await rotate(
          rounds,
          contenders,
          firstExecutions(concurrency, seconds * 1000, env.namespace),
        );
        const keyed = contenders.slice(1);
        for (const c of keyed) await prefill(c, env.namespace, replayKeys, concurrency);
        ctx.log(`peers: replays, ${layout} layout, c=${concurrency}`);
        const replayed = await rotate(
          rounds,
          keyed,
          replays(concurrency, seconds * 1000, env.namespace, replayKeys),
        );
        await checkReplaysDidNotExecute(env, keyed, replayKeys);
        const plainFirst = firsts.get(plainOne!.variant.id)!;
        const idemFirst = firsts.get(idemOne!.variant.id)!;
        const idemReplay = replayed.get(idemOne!.variant.id)!;
        const where = layout === 'function' ? 'function call' : 'HTTP via Express';
        for (const c of keyed) {
          const { id, label } = c.variant;
          const first = firsts.get(id)!;
          const replay = replayed.get(id)!;
          figures.push(
            compare(`first execution (${where}): ${label}`, first, plainFirst, plainOne!.variant.label),
          );
          figures.push(
            compare(
              `replay (${where}): ${label}`,
              replay,
              plainFirst,
              `${plainOne!.variant.label}, first execution`,
            ),
          );
          if (c !== idemOne) {
            figures.push(
              compare(
                `first execution (${where}): ${label} vs idem`,
                first,
                idemFirst,
                idemOne!.variant.label,
              ),
            );
            figures.push(
              compare(`replay (${where}): ${label} vs idem`, replay, idemReplay, idemOne!.variant.label),
            );
          }
          ctx.log(
            `  ${label}: first ${round(first.opsPerSecond, 0)} ops/s (p99 ${round(first.p99Ms)} ms), replay ${round(replay.opsPerSecond, 0)} ops/s (p99 ${round(replay.p99Ms)} ms); plain ${round(plainFirst.opsPerSecond, 0)} ops/s`,
          );
        }
        notes.push(
          `Throughput, ${where}: p99 latency of first executions — ${contenders
            .map((c) => `${c.variant.label} ${round(firsts.get(c.variant.id)!.p99Ms)} ms`)
            .join(', ')}; of replays — ${keyed
            .map((c) => `${c.variant.label} ${round(replayed.get(c.variant.id)!.p99Ms)} ms`)
            .join(', ')}.`,
        );
      } finally {
        for (const c of contenders) await c.running.close();
      }
    }

    // ---- drills -----------------------------------------------------------------------------
    const drillRequests = 100;
    for (const instances of [1, 2]) {
      ctx.log(`peers: concurrency drill, ${drillRequests} identical requests over ${instances} instance(s)`);
      const results: DrillResult[] = [];
      for (const variant of variants) {
        results.push(await concurrencyDrill(env, variant, { requests: drillRequests, instances }));
      }
      addDrill(
        figures,
        notes,
        `concurrency drill, ${drillRequests} identical requests, ${instances} instance${instances > 1 ? 's' : ''}`,
        results,
      );
    }
    ctx.log('peers: the request fails after the business write; the client retries');
    addDrill(
      figures,
      notes,
      'request fails after the write, client retries',
      await Promise.all(variants.map((v) => failureDrill(env, v, 'after-write'))),
    );
    ctx.log('peers: the process is killed after the business write; the client retries a restarted instance');
    const inProgressMs = 1000;
    addDrill(
      figures,
      notes,
      'process killed after the write, client retries',
      await crashDrill(env, variants, { inProgressMs }),
    );
    ctx.log('peers: a transient failure before any write; the client retries');
    const transient = await Promise.all(variants.map((v) => failureDrill(env, v, 'before-write')));
    for (const r of transient) {
      const isIdem = r.variant.id === 'idem' || r.variant.id === 'express-idem';
      figures.push({
        name: `transient failure before the write, client retries: ${r.variant.label}`,
        value: r.rows,
        unit: 'effects',
        ...(isIdem
          ? { target: { min: 1, max: 1, description: 'exactly 1 effect' }, holds: r.rows === 1 }
          : {}),
      });
    }
    notes.push(`Transient failure before the write, client retries: ${describe(transient)}.`);

    notes.push(
      `Method: one process; PostgreSQL pool of ${concurrency + 2} connections, one Redis connection per library; ` +
        `throughput at ${concurrency} concurrent callers, ${seconds} s per run, the median of ${rounds} rotating run(s); ` +
        `HTTP variants run a real Express 5 server on 127.0.0.1 and an undici client (${concurrency} connections) in the same process. ` +
        `Replays repeat ${replayKeys} finished keys; after the replay runs the bench checks that every replayed key still has exactly one row.`,
      'Drills: every request of a drill carries the same key and payload; the count is of business rows for that key (effects actually produced); ' +
        'duplicate effects = rows − 1. The handler holds its transaction 50 ms before writing in the concurrency drill, so the duplicates overlap. ' +
        'With 2 instances the requests alternate between two app instances that share PostgreSQL and Redis but not memory, like two replicas.',
      `Crash drill: a child process sends one request per variant and kills itself (SIGKILL) once every handler has written its row, ` +
        `before any library records completion; the peers' in-progress window in that process is ${inProgressMs} ms ` +
        `(Powertools: the fake Lambda context's remaining time; @node-idempotency: its record TTL, 24 h by default), so the outcome of the ` +
        `retries shows within seconds; with the defaults the retries are refused for that long, then the next one runs the handler again. ` +
        `The client retries every 200 ms for up to ${inProgressMs + 2500} ms against a restarted instance.`,
      ...variants.map((v) => `${v.label}: ${v.mechanism}`),
      'Why idem shows no duplicate: the key is claimed by an INSERT under the primary key of the requests table in the same transaction ' +
        'as the business row, and the stored result is written in that transaction too. A concurrent duplicate blocks on the row lock and ' +
        'then reads the committed result; a failure or a crash before COMMIT rolls back the row and the claim together, so the retry runs ' +
        'once; after COMMIT the retry replays. The peers record the key in Redis or memory, outside the business transaction: whatever ' +
        'happens between the business commit and their completion record (a failure, a crash, an expired in-progress window) turns the ' +
        'retry into a second execution or leaves the key stuck.',
      `This module took ${Math.round((Date.now() - started) / 1000)} s in ${ctx.quick ? 'quick' : 'full'} mode (full mode: 3 rounds of 5 s per throughput figure, about 3 to 4 minutes on 2 cores).`,
    );
  } finally {
    await env.close();
  }
  return { name: 'Peers', figures, notes };
}

function compare(name: string, value: LoadResult, base: LoadResult, baseName: string): BenchFigure {
  return {
    name,
    value: round(value.opsPerSecond, 0),
    unit: 'ops/s',
    baseline: { name: baseName, value: round(base.opsPerSecond, 0) },
    ratio: round(value.opsPerSecond / base.opsPerSecond),
    higherIsBetter: true,
  };
}

const isIdem = (v: Variant) => v.id === 'idem' || v.id === 'express-idem';

function addDrill(figures: BenchFigure[], notes: string[], drill: string, results: DrillResult[]): void {
  for (const r of results) {
    const duplicates = duplicatesOf(r);
    figures.push({
      name: `${drill}: ${r.variant.label}`,
      value: duplicates,
      unit: 'duplicate effects',
      ...(isIdem(r.variant)
        ? { target: { max: 0, description: 'idem must show 0' }, holds: duplicates === 0 && r.rows === 1 }
        : {}),
    });
  }
  notes.push(`${drill[0]!.toUpperCase()}${drill.slice(1)}: ${describe(results)}.`);
}

/** `label: N rows (answers…; after K retries: last answer)` for every result. */
function describe(results: DrillResult[]): string {
  return results
    .map((r) => {
      const answers = Object.entries(r.answers)
        .map(([status, n]) => `${n}× ${status}`)
        .join(', ');
      const retry = r.final
        ? `; after ${r.retries} retr${r.retries === 1 ? 'y' : 'ies'}: ${r.final.status}`
        : '';
      return `${r.variant.label} ${r.rows} row${r.rows === 1 ? '' : 's'} (${answers}${retry})`;
    })
    .join('; ');
}

/** A replay that ran the handler again would leave a second row: there must be exactly one per key. */
async function checkReplaysDidNotExecute(
  env: Awaited<ReturnType<typeof createPeerEnvironment>>,
  contenders: readonly Contender[],
  count: number,
): Promise<void> {
  for (const c of contenders) {
    const { rows } = await env.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${env.schema}".orders WHERE request_key LIKE $1`,
      [`${env.namespace}-replay-${c.variant.id}-%`],
    );
    if (rows[0]!.n !== count) {
      throw new Error(`${c.variant.label}: ${rows[0]!.n} rows for ${count} replayed keys`);
    }
  }
}
