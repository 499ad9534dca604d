import type { Transaction } from '../core/sql.js';
import { sleepUnlessAborted } from '../client/sleep.js';
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
  while (!signal?.aborted) {
    let claimed: number;
    try {
      const tasks = await claims.claim<P>(queue, { limit: batchSize });
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
