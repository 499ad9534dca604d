import { setTimeout as delay } from 'node:timers/promises';
import { systemClock, type Clock } from '../clock.js';

/**
 * Waits `ms` on `clock`, or until `signal` aborts (then resolves early, without throwing).
 * On the system clock the timer is cancelled on abort, so a stopped worker does not keep the
 * process alive for the rest of its poll interval; an injected clock is given the signal and
 * raced as well, since a clock may ignore it.
 */
export async function sleepUnlessAborted(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted || ms <= 0) return;
  if (clock === systemClock) {
    await delay(ms, undefined, signal ? { signal } : undefined).catch(() => undefined);
    return;
  }
  if (!signal) return clock.sleep(ms);
  let onAbort = (): void => undefined;
  const aborted = new Promise<void>((resolve) => {
    onAbort = () => resolve();
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    await Promise.race([clock.sleep(ms, signal), aborted]);
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}
