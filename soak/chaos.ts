/**
 * The faults: kill -9 of a random app instance at random moments, its restart after a short
 * pause, and broker restarts. Every kill is logged with what was in flight at that moment: client
 * requests sent to that instance, payments between steps (pending, lease held), outbox events not
 * yet published, events published but not yet in the ledger's inbox, receipts being processed and
 * receipt tasks claimed by that very process.
 */
import type pg from 'pg';
import type { Broker } from './broker.js';
import type { AppInstance } from './instances.js';
import { sleep, type Random } from './random.js';

export interface ChaosStats {
  kills: number;
  restarts: number;
  failedRestarts: number;
  brokerRestarts: number;
  /** Kills that caught at least one of each kind of work in flight. */
  midRequest: number;
  midStep: number;
  midDispatch: number;
  midConsume: number;
  midWebhook: number;
  midClaim: number;
  log: string[];
}

export function newChaosStats(): ChaosStats {
  return {
    kills: 0,
    restarts: 0,
    failedRestarts: 0,
    brokerRestarts: 0,
    midRequest: 0,
    midStep: 0,
    midDispatch: 0,
    midConsume: 0,
    midWebhook: 0,
    midClaim: 0,
    log: [],
  };
}

export interface ChaosOptions {
  instances: readonly AppInstance[];
  broker: Broker;
  pool: pg.Pool;
  schema: string;
  random: Random;
  stats: ChaosStats;
  killEveryMs: number;
  brokerEveryMs: number;
  running: () => boolean;
  say: (line: string) => void;
}

interface InFlight {
  steps: number;
  unpublished: number;
  unconsumed: number;
  webhooks: number;
  claimed: number;
}

async function snapshot(options: ChaosOptions, pid: number): Promise<InFlight> {
  const s = `"${options.schema}"`;
  const d = `"${options.schema}_demo"`;
  const { rows } = await options.pool.query<Record<keyof InFlight, string>>(
    `SELECT
       (SELECT count(*) FROM ${s}.requests WHERE state = 'pending' AND locked_until > now()) AS steps,
       (SELECT count(*) FROM ${s}.outbox WHERE published_at IS NULL) AS unpublished,
       (SELECT count(*) FROM ${s}.outbox o WHERE published_at IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM ${d}.ledger l WHERE l.event_id = o.id::text)) AS unconsumed,
       (SELECT count(*) FROM ${s}.webhook_receipts WHERE state IN ('pending', 'processing')) AS webhooks,
       (SELECT count(*) FROM ${s}.tasks WHERE state = 'claimed' AND locked_by LIKE $1) AS claimed`,
    [`%:${pid}:%`],
  );
  const r = rows[0]!;
  return {
    steps: Number(r.steps),
    unpublished: Number(r.unpublished),
    unconsumed: Number(r.unconsumed),
    webhooks: Number(r.webhooks),
    claimed: Number(r.claimed),
  };
}

/** Kills and restarts instances until `running()` is false; then waits for the last restart. */
export async function killLoop(options: ChaosOptions): Promise<void> {
  const { random, stats, say } = options;
  const restarts = new Set<Promise<void>>();
  while (options.running()) {
    await sleep(random.between(0.3, 1.7) * options.killEveryMs);
    if (!options.running()) break;
    const candidates = options.instances.filter((i) => i.up);
    // Now and then the last instance up dies too (a full outage); mostly one stays up. With a
    // single instance, every kill is a full outage.
    const last = options.instances.length > 1 && candidates.length === 1;
    if (candidates.length === 0 || (last && random.chance(0.8))) continue;
    const victim = random.pick(candidates);
    const pid = victim.pid!;
    const requests = victim.inflight;
    const work = await snapshot(options, pid).catch(() => undefined);
    await victim.kill9();
    stats.kills++;
    if (requests > 0) stats.midRequest++;
    if (work?.steps) stats.midStep++;
    if (work?.unpublished) stats.midDispatch++;
    if (work?.unconsumed) stats.midConsume++;
    if (work?.webhooks) stats.midWebhook++;
    if (work?.claimed) stats.midClaim++;
    const line =
      `kill -9 ${victim.name} (pid ${pid}): ${requests} requests in flight` +
      (work
        ? `; payments mid-step ${work.steps}, events unpublished ${work.unpublished}, published not consumed ${work.unconsumed}, webhooks unprocessed ${work.webhooks}, receipt tasks claimed by it ${work.claimed}`
        : '');
    stats.log.push(`${new Date().toISOString()} ${line}`);
    say(line);
    const restart = (async () => {
      await sleep(random.between(300, 2500));
      // Like a supervisor: a start that fails (the demo exits when the broker is down at start-up)
      // is tried again, a few seconds later, a bounded number of times.
      for (let attempt = 1; attempt <= 20; attempt++) {
        try {
          await victim.start();
          stats.restarts++;
          return;
        } catch (error) {
          stats.failedRestarts++;
          say(
            `start of ${victim.name} failed (attempt ${attempt}): ${(error as Error).message.split('\n')[0]}`,
          );
          await sleep(2000);
        }
      }
    })();
    restarts.add(restart);
    void restart.finally(() => restarts.delete(restart));
  }
  await Promise.all([...restarts]);
}

/** Restarts the broker every `brokerEveryMs` (± 30 %) until `running()` is false. */
export async function brokerLoop(options: ChaosOptions): Promise<void> {
  const { broker, random, stats, say } = options;
  if (!broker.restartable) return;
  while (options.running()) {
    const wait = random.between(0.7, 1.3) * options.brokerEveryMs;
    const until = Date.now() + wait;
    while (Date.now() < until && options.running()) await sleep(Math.min(500, until - Date.now()));
    if (!options.running()) break;
    const downMs = random.between(1000, 5000);
    const started = Date.now();
    say(`broker restart (${broker.name}), down ${Math.round(downMs)} ms`);
    await broker.restart(downMs);
    stats.brokerRestarts++;
    stats.log.push(
      `${new Date().toISOString()} broker ${broker.name} restarted in ${Date.now() - started} ms`,
    );
    say(`broker back after ${Date.now() - started} ms`);
  }
}
