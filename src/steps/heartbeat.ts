import type { Clock } from '../core/clock.js';
import type { FencedLease } from './lease.js';

/** A running heartbeat. */
export interface Heartbeat {
  /** Stops the beats and waits for a renewal in flight, so none runs after the call ended. */
  stop(): Promise<void>;
}

/**
 * Renews `lease` every `everyMs` of `clock` time while an external call runs, so a call longer
 * than the lease keeps it. A renewal that finds the fence raised (a retry took the operation over)
 * calls `onLost` and stops: the caller aborts the call. A renewal that fails (the database
 * unreachable for a moment) is tried again at the next beat; with beats at a third of the lease,
 * two may fail before the lease lapses, and the step's record transaction checks the fence anyway.
 */
export function startHeartbeat(
  lease: FencedLease,
  clock: Clock,
  everyMs: number,
  onLost: () => void,
): Heartbeat {
  const stopped = new AbortController();
  const whenStopped = new Promise<void>((resolve) =>
    stopped.signal.addEventListener('abort', () => resolve(), { once: true }),
  );
  const beats = (async () => {
    for (;;) {
      // Raced with the stop signal, for clocks that ignore it.
      await Promise.race([clock.sleep(everyMs, stopped.signal), whenStopped]);
      if (stopped.signal.aborted) return;
      let alive: boolean;
      try {
        alive = await lease.renew();
      } catch {
        continue;
      }
      if (stopped.signal.aborted) return;
      if (!alive) {
        onLost();
        return;
      }
    }
  })();
  return {
    async stop() {
      stopped.abort();
      await beats;
    },
  };
}
