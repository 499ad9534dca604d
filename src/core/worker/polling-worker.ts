/**
 * The one polling loop of idem's background workers (the outbox dispatcher, the webhook processor
 * and sender, the claims worker): `concurrency` loops that each run a round, run again at once
 * while there is work, and otherwise wait for the poll interval or a `notify()`. The wait is
 * cancellable: `stop()` ends it at once (no sleeping `clock.sleep` is waited out), then waits for
 * the rounds in flight to finish, so a stopped worker has nothing running.
 */
import { systemClock, type Clock } from '../clock.js';
import { sleepUnlessAborted } from '../resilience/sleep.js';
import { positiveInteger } from '../validate.js';

/** What a round asks for next. */
export interface NextRound {
  /** How long to wait before the next round, in ms; 0 runs it at once. */
  idleMs: number;
  /** Whether `notify()` ends the wait early. Default true. A pause after an outage is not. */
  wakeable?: boolean;
}

/** The error-reporting hook every worker takes: the error, and where in the worker it happened. */
export type WorkerErrorHandler<Where extends string = string> = (error: unknown, where: Where) => void;

/** Options of a `PollingWorker`. */
export interface PollingWorkerOptions {
  /**
   * One round of loop `index`: claims and handles what is due, and says when to run the next
   * (usually at once after work, the poll interval after none).
   */
  round: (index: number) => Promise<NextRound>;
  /** Loops run at once. Default 1. */
  concurrency?: number;
  /** Time of the idle waits. Default: the system clock. */
  clock?: Clock;
  /** Sees an error a round threw; the loop survives it. */
  onError: (error: unknown) => void;
  /**
   * The wait after a round threw, given the failures in a row. Default: `pollIntervalMs()`,
   * wakeable.
   */
  afterError?: (failures: number) => NextRound;
  /** The idle poll interval now, for the default `afterError`. */
  pollIntervalMs: () => number;
}

/**
 * Runs loops of rounds until stopped. Owned by the dispatcher, the webhook processor and sender;
 * the claims worker is one.
 */
export class PollingWorker {
  private readonly settings: PollingWorkerOptions;
  private readonly clock: Clock;
  private readonly concurrency: number;
  private loops: Promise<void>[] = [];
  private running = false;
  /** Set by `notify()`; a loop that sees it after its round runs again instead of waiting. */
  private wakeRequested = false;
  private readonly waits = new Set<{ wakeable: boolean; controller: AbortController }>();

  constructor(options: PollingWorkerOptions) {
    this.settings = options;
    this.clock = options.clock ?? systemClock;
    this.concurrency = positiveInteger('concurrency', options.concurrency ?? 1);
  }

  /** Whether the loops run. */
  get isRunning(): boolean {
    return this.running;
  }

  /** Starts the loops; resolves once they run. Idempotent. */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.loops = Array.from({ length: this.concurrency }, (_, i) => this.loop(i));
  }

  /** Ends every idle wait at once, then waits for the rounds in flight. Idempotent. */
  async stop(): Promise<void> {
    this.running = false;
    for (const wait of this.waits) wait.controller.abort();
    await Promise.all(this.loops);
    this.loops = [];
  }

  /** Wakes idle loops now (new work was added). */
  notify(): void {
    this.wakeRequested = true;
    for (const wait of this.waits) if (wait.wakeable) wait.controller.abort();
  }

  private async loop(index: number): Promise<void> {
    let failures = 0;
    while (this.running) {
      this.wakeRequested = false;
      let next: NextRound;
      try {
        next = await this.settings.round(index);
        failures = 0;
      } catch (error) {
        this.settings.onError(error);
        next = this.settings.afterError?.(++failures) ?? { idleMs: this.settings.pollIntervalMs() };
      }
      await this.idle(next);
    }
  }

  /** Waits `next.idleMs`, or less when woken (if wakeable) or stopped. */
  private async idle(next: NextRound): Promise<void> {
    const wakeable = next.wakeable ?? true;
    if (!this.running || next.idleMs <= 0 || (wakeable && this.wakeRequested)) return;
    const wait = { wakeable, controller: new AbortController() };
    this.waits.add(wait);
    try {
      await sleepUnlessAborted(this.clock, next.idleMs, wait.controller.signal);
    } finally {
      this.waits.delete(wait);
    }
  }
}

/**
 * Runs `round` until it returns nothing (or `maxRounds` rounds), collecting what it returned: a
 * worker's `drain()`, for tests, scripts and cron.
 */
export async function drainRounds<T>(round: () => Promise<readonly T[]>, maxRounds = 10_000): Promise<T[]> {
  const results: T[] = [];
  for (let i = 0; i < maxRounds; i++) {
    const batch = await round();
    if (batch.length === 0) break;
    results.push(...batch);
  }
  return results;
}
