/**
 * A broker that is still starting, or restarting, when the demo starts is waited for instead of
 * ending `npm start` with ECONNREFUSED (the soak saw demo instances exit while RabbitMQ restarted,
 * and be started again by hand). Refusals that waiting cannot change (bad credentials, a bad URL)
 * fail at once.
 */
import { createBackoff } from '../src/core/resilience/backoff.js';
import { isRetryable } from '../src/core/retryable.js';

export interface BrokerWaitOptions {
  /** How long to keep trying, in ms. Default 60 000 (`BROKER_WAIT_MS`). */
  waitMs?: number;
  /** Where the one line per failed attempt goes. Default: console.log. */
  log?: (line: string) => void;
  /** Waits between attempts. Default: a timer. */
  sleep?: (ms: number) => Promise<void>;
}

/** Failures of a broker that is not (yet) listening: worth another attempt. */
const unreachable =
  /ECONNREFUSED|ECONNRESET|EHOSTUNREACH|ETIMEDOUT|CONNECTION_REFUSED|Socket closed abruptly/i;

export function brokerUnreachable(error: unknown): boolean {
  if (isRetryable(error)) return true;
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  return unreachable.test(error.message) || (typeof code === 'string' && unreachable.test(code));
}

/** `attempt()` until it succeeds, retrying while the broker is unreachable, for at most `waitMs`. */
export async function untilBrokerAnswers<T>(
  what: string,
  attempt: () => Promise<T>,
  options: BrokerWaitOptions = {},
): Promise<T> {
  const waitMs = options.waitMs ?? 60_000;
  const log = options.log ?? ((line: string) => console.log(line));
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const delay = createBackoff(undefined, {
    strategy: 'exponential',
    baseMs: 250,
    maxMs: 4000,
    jitter: 'none',
  });
  const deadline = Date.now() + waitMs;
  for (let failures = 1; ; failures++) {
    try {
      return await attempt();
    } catch (error) {
      const next = delay(failures);
      if (!brokerUnreachable(error) || Date.now() + next > deadline) throw error;
      const reason = error instanceof Error ? error.message : String(error);
      log(`waiting for ${what} (attempt ${failures}: ${reason}); next attempt in ${next} ms`);
      await sleep(next);
    }
  }
}
