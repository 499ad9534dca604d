/**
 * The duplicate-effect drills. Each one sends requests with one key and counts the business rows
 * that key produced: the effects that actually happened. Duplicate effects = rows − 1.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { samplePayload, type Faults } from './business.js';
import { runCrashChild } from './crash.js';
import type { PeerEnvironment } from './environment.js';
import type { Answer, RunningVariant, Variant } from './variant.js';

export interface DrillResult {
  variant: Variant;
  key: string;
  /** Business rows written for the key. */
  rows: number;
  /** How many callers saw each answer, e.g. `{ "201": 1, "409": 99 }`. */
  answers: Record<string, number>;
  /** Failure and crash drills: the retry loop's last answer and how many retries it sent. */
  final?: Answer;
  retries?: number;
}

export const duplicatesOf = (result: DrillResult): number => Math.max(0, result.rows - 1);

const drillKey = (env: PeerEnvironment, drill: string, variant: Variant): string =>
  `${env.namespace}-${drill}-${variant.id}-${randomBytes(4).toString('hex')}`;

function tally(answers: Answer[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const a of answers) counts[a.status] = (counts[a.status] ?? 0) + 1;
  return counts;
}

export interface ConcurrencyDrillOptions {
  /** Identical requests sent at once. Default 100. */
  requests?: number;
  /**
   * Instances of the variant the requests are spread over, round robin, like replicas behind a
   * load balancer. Each instance has its own memory; they share PostgreSQL and Redis. Default 1.
   */
  instances?: number;
  /** How long the handler holds its transaction before writing, so the duplicates overlap. Default 50 ms. */
  holdMs?: number;
}

/** `requests` concurrent identical requests (same key, same payload). */
export async function concurrencyDrill(
  env: PeerEnvironment,
  variant: Variant,
  options: ConcurrencyDrillOptions = {},
): Promise<DrillResult> {
  const requests = options.requests ?? 100;
  const faults: Faults = { holdMs: options.holdMs ?? 50 };
  const instances: RunningVariant[] = [];
  try {
    for (let i = 0; i < (options.instances ?? 1); i++) {
      instances.push(await variant.start({ env, faults, clientConnections: requests }));
    }
    const key = drillKey(env, 'concurrent', variant);
    const answers = await Promise.all(
      Array.from({ length: requests }, (_, i) => instances[i % instances.length]!.call(key, samplePayload)),
    );
    return { variant, key, rows: await env.countRows(key), answers: tally(answers) };
  } finally {
    for (const instance of instances) await instance.close();
  }
}

export interface RetryPolicy {
  /** Pause between retries. Default 200 ms. */
  intervalMs?: number;
  /** The client gives up after this long. Default 2000 ms. */
  deadlineMs?: number;
}

/** A client that retries every failed answer until it gets a success or its deadline passes. */
export async function retryUntilOk(
  running: RunningVariant,
  key: string,
  policy: RetryPolicy = {},
): Promise<{ final: Answer; retries: number }> {
  const deadline = Date.now() + (policy.deadlineMs ?? 2000);
  let retries = 0;
  for (;;) {
    retries++;
    const answer = await running.call(key, samplePayload);
    if (answer.ok || Date.now() >= deadline) return { final: answer, retries };
    await sleep(policy.intervalMs ?? 200);
  }
}

/**
 * The request fails once at `point` (an error thrown by the handler's own code), then the client
 * retries. `after-write`: the business row is written (and, for the plain handler and the peers,
 * committed) before the failure, e.g. a timeout on a later call or a response that cannot be sent.
 * `before-write`: a transient failure before anything is written; the retry should produce the one
 * effect (0 rows means the effect was lost).
 */
export async function failureDrill(
  env: PeerEnvironment,
  variant: Variant,
  point: 'after-write' | 'before-write',
  policy: RetryPolicy = {},
): Promise<DrillResult> {
  let failNext = true;
  const fail = async () => {
    if (!failNext) return;
    failNext = false;
    throw new Error(`injected failure ${point}`);
  };
  const faults: Faults = point === 'after-write' ? { afterWrite: fail } : { beforeWrite: fail };
  const running = await variant.start({ env, faults });
  try {
    const key = drillKey(env, point, variant);
    const first = await running.call(key, samplePayload);
    const { final, retries } = await retryUntilOk(running, key, policy);
    return { variant, key, rows: await env.countRows(key), answers: tally([first]), final, retries };
  } finally {
    await running.close();
  }
}

export interface CrashDrillOptions {
  /** The peers' in-progress window in the crashing process (see `VariantOptions.inProgressMs`). Default 1000 ms. */
  inProgressMs?: number;
  retry?: RetryPolicy;
}

/**
 * The process dies right after the handler's business write, before the idempotency layer records
 * completion: a child process runs one request per variant and SIGKILLs itself once every handler
 * has written. Then a restarted instance (fresh memory, same PostgreSQL and Redis) gets the client's
 * retries until one succeeds or the deadline passes.
 */
export async function crashDrill(
  env: PeerEnvironment,
  variants: readonly Variant[],
  options: CrashDrillOptions = {},
): Promise<DrillResult[]> {
  const inProgressMs = options.inProgressMs ?? 1000;
  const keys = Object.fromEntries(variants.map((v) => [v.id, drillKey(env, 'crash', v)]));
  const child = await runCrashChild({
    databaseUrl: env.databaseUrl,
    redisUrl: env.redisUrl,
    schema: env.schema,
    namespace: env.namespace,
    keys,
    inProgressMs,
    ...(env.recording ? { recording: env.recording } : {}),
  });
  const policy = { intervalMs: 200, deadlineMs: inProgressMs + 2500, ...options.retry };
  return Promise.all(
    variants.map(async (variant) => {
      const key = keys[variant.id]!;
      const died = child.failed[variant.id];
      const running = await variant.start({ env });
      try {
        const { final, retries } = await retryUntilOk(running, key, policy);
        return {
          variant,
          key,
          rows: await env.countRows(key),
          answers: died
            ? { [`failed before the crash: ${died.status}`]: 1 }
            : { 'killed after the write': 1 },
          final,
          retries,
        };
      } finally {
        await running.close();
      }
    }),
  );
}
