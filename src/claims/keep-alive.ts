import { isFenced } from '../core/errors.js';
import { sleepUnlessAborted } from '../core/resilience/sleep.js';
import type { Claims } from './claims.js';
import type { ClaimedTask } from './task.js';

/** A running heartbeat. */
export interface KeepAlive {
  /** Aborted when the lease is lost (taken over or finished elsewhere): stop working on the task. */
  readonly signal: AbortSignal;
  /** Stops the heartbeats and waits for the one in flight. */
  stop(): Promise<void>;
}

/** Options of `keepAlive`. */
export interface KeepAliveOptions {
  /** Time between heartbeats. Default a third of the lease, so two can fail before it lapses. */
  intervalMs?: number;
  /** Called when a heartbeat fails for another reason than a lost lease (it is retried). */
  onError?: (error: unknown) => void;
}

/**
 * Renews a task's lease in the background while slow work runs outside a transaction (an LLM
 * call, a long download). When a heartbeat finds the lease taken over, `signal` aborts: pass it
 * to the work so it stops early. The completion is still fenced, so a holder that misses the
 * signal still cannot complete.
 */
export function keepAlive(claims: Claims, task: ClaimedTask, options: KeepAliveOptions = {}): KeepAlive {
  const lost = new AbortController();
  const stopped = new AbortController();
  const intervalMs = options.intervalMs ?? Math.max(1, Math.floor(claims.leaseMs / 3));
  const loop = (async () => {
    while (!stopped.signal.aborted) {
      await sleepUnlessAborted(claims.clock, intervalMs, stopped.signal);
      if (stopped.signal.aborted) return;
      try {
        await claims.heartbeat(task);
      } catch (error) {
        if (isFenced(error)) {
          lost.abort(error);
          return;
        }
        options.onError?.(error);
      }
    }
  })();
  return {
    signal: lost.signal,
    async stop() {
      stopped.abort();
      await loop;
    },
  };
}
