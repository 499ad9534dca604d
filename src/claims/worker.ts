import type { Transaction } from '../core/sql.js';
import { validateTenants } from '../core/tenant.js';
import { sleepUnlessAborted } from '../core/resilience/sleep.js';
import type { Claims, RunOutcome } from './claims.js';
import type { ClaimedTask } from './task.js';

/** Options of `work`. */
export interface WorkOptions<P, R> {
  /** Tasks claimed per round trip; they run concurrently, each on its own connection. Default 10. */
  batchSize?: number;
  /** Wait after an empty or partial batch, in ms. Default 1000. A full batch polls again at once. */
  pollMs?: number;
  /** Stops the loop after the batch in flight. */
  signal?: AbortSignal;
  /** Sees every task's outcome (completed, retried, dead-lettered or fenced). */
  onOutcome?: (task: ClaimedTask<P>, outcome: RunOutcome<R>) => void;
  /** Sees database errors of the loop itself; the loop backs off by `pollMs` and goes on. */
  onError?: (error: unknown) => void;
  /**
   * Only these tenants' tasks: each claim is one tenant's, pinned to it, taken in turn until the
   * batch is full (a worker per shard of a database distributed by tenant, or per group of
   * tenants). Default: every tenant's tasks of the queue, in one claim.
   */
  tenants?: readonly string[];
}

/**
 * A polling worker: claims batches from `queue` and runs each task with `claims.run` (fence,
 * the handler's writes and the completion in one transaction). Resolves when `signal` aborts.
 */
export async function work<P, R, Client>(
  claims: Claims<Client>,
  queue: string,
  handler: (tx: Transaction<Client>, task: ClaimedTask<P>) => Promise<R>,
  options: WorkOptions<P, R> = {},
): Promise<void> {
  const batchSize = options.batchSize ?? 10;
  const pollMs = options.pollMs ?? 1000;
  const signal = options.signal;
  const tenants = validateTenants(options.tenants);
  let round = 0;
  const claimBatch = async (): Promise<ClaimedTask<P>[]> => {
    if (!tenants) return claims.claim<P>(queue, { limit: batchSize });
    // One tenant after another, starting one further each round so each gets its turn first.
    const tasks: ClaimedTask<P>[] = [];
    const start = round++ % tenants.length;
    for (let i = 0; i < tenants.length && tasks.length < batchSize; i++) {
      const tenant = tenants[(start + i) % tenants.length]!;
      tasks.push(...(await claims.claim<P>(queue, { limit: batchSize - tasks.length, tenant })));
    }
    return tasks;
  };
  while (!signal?.aborted) {
    let claimed: number;
    try {
      const tasks = await claimBatch();
      claimed = tasks.length;
      await Promise.all(
        tasks.map(async (task) => {
          const outcome = await claims.run(task, handler);
          options.onOutcome?.(task, outcome);
        }),
      );
    } catch (error) {
      options.onError?.(error);
      claimed = 0;
    }
    if (claimed < batchSize) await sleepUnlessAborted(claims.clock, pollMs, signal);
  }
}
