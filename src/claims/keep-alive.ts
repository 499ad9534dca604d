import type { IdemEvents } from '../core/event-channel.js';
import { isFenced } from '../core/errors.js';
import { sleepUnlessAborted } from '../core/resilience/sleep.js';
import type { Claims } from './claims.js';
import type { ClaimedTask } from './task.js';

/** A task's heartbeat: `start()` begins renewing its lease, `stop()` ends it. */
export interface KeepAlive {
  /** Aborted when the lease is lost (taken over or finished elsewhere): stop working on the task. */
  readonly signal: AbortSignal;
  /** Starts the heartbeats. Idempotent. */
  start(): Promise<void>;
  /** Stops the heartbeats and waits for the one in flight. */
  stop(): Promise<void>;
}

/** Options of `createKeepAlive`. */
export interface KeepAliveOptions {
  /** The tasks' store the task was claimed from. */
  claims: Claims;
  /** The claimed task whose lease to keep. */
  task: ClaimedTask;
  /** Time between heartbeats. Default a third of the lease, so two can fail before it lapses. */
  intervalMs?: number;
  /**
   * Where a heartbeat that failed for another reason than a lost lease is reported (it is retried
   * at the next interval): an `error` event, source `keep-alive`, where `heartbeat`. Default: the
   * channel of `claims` (its `events` option).
   */
  events?: IdemEvents;
}

/**
 * A heartbeat that renews a task's lease in the background while slow work runs outside a
 * transaction (an LLM call, a long download). When a heartbeat finds the lease taken over,
 * `signal` aborts: pass it to the work so it stops early. The completion is still fenced, so a
 * holder that misses the signal still cannot complete. Creating it starts nothing.
 *
 * @example
 * const alive = createKeepAlive({ claims, task });
 * await alive.start();
 * try {
 *   await think(task.payload, alive.signal);
 * } finally {
 *   await alive.stop();
 * }
 */
export function createKeepAlive(options: KeepAliveOptions): KeepAlive {
  const { claims, task } = options;
  const lost = new AbortController();
  const stopped = new AbortController();
  const intervalMs = options.intervalMs ?? Math.max(1, Math.floor(claims.leaseMs / 3));
  const events = options.events ?? claims.events;
  let loop: Promise<void> | undefined;
  const beat = async () => {
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
        events.emit('error', { source: 'keep-alive', where: 'heartbeat', error });
      }
    }
  };
  return {
    signal: lost.signal,
    async start() {
      loop ??= beat();
    },
    async stop() {
      stopped.abort();
      await loop;
    },
  };
}
