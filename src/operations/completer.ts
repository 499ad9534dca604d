/**
 * The completer: drives defined operations (`idem.define`) whose holder died to their end without
 * a client's retry, as Brandur Leach's atomic-phases design has a completer for abandoned keys and
 * DBOS recovers pending workflows. One more worker on the shared polling kernel.
 *
 * A round takes due intents (the holder's lease lapsed) of the operations this process has code
 * for, in one statement that also counts the attempt and pushes the intent out by a lease, so two
 * completers never run one intent at once; then each is taken over (its fence raised, so a holder
 * that was only slow is refused from its next write) and resumed after its last recorded step,
 * with the same derived keys: a provider that honours keys charges once. No transaction or lock is
 * held while the body runs: its steps and calls are the same short transactions as a client's.
 *
 * An attempt that fails with a transient error (the database or a provider down) is tried again
 * with backoff, for ever by default; the intent stays visible (`list`, the console, the
 * `idem_intents_waiting` metric) with its last error. For one that can never complete, the
 * definition's `giveUp` policy or an operator (`giveUp()`, `idem intents give-up`) chooses its
 * compensation or to end it failed, visibly (`StepFailedError` for every retry of its key).
 */
import { InvalidArgumentError, isFenced, isStepFailed, type OperationScope } from '../core/errors.js';
import { createBackoff, type BackoffOptions } from '../core/resilience/backoff.js';
import { validateKey, validateName } from '../core/keys.js';
import { positive, positiveInteger } from '../core/validate.js';
import type { IdemEvents } from '../core/event-channel.js';
import { drainRounds, PollingWorker } from '../core/worker/polling-worker.js';
import { describeFailure } from '../steps/engine.js';
import type { GiveUpAction } from './options.js';
import type { Idem } from './idem.js';
import type { DueIntentRow } from './intent-statements.js';

/** What became of one intent in a completer's round. */
export type CompletionKind =
  /** The body ran to its end; its outcome is stored (a business refusal included). */
  | 'completed'
  /** The compensation ran to its end; its outcome is stored. */
  | 'compensated'
  /** Ended failed for good: a permanent error, or a give-up with `fail`. */
  | 'failed'
  /** The attempt failed with a transient error; tried again after `retryInMs`. */
  | 'retrying'
  /** Not abandoned any more (finished by a client's retry, or its holder is alive): left alone. */
  | 'skipped';

/** One intent's attempt, as `drain()` returns it and the `completion` event carries it. */
export interface Completion {
  scope: OperationScope;
  kind: CompletionKind;
  /** The completer's attempts at it so far, this one included. */
  attempts: number;
  /** `retrying`: the wait before the next attempt. */
  retryInMs?: number;
  /** `retrying`, `failed`: why. */
  error?: string;
}

/** A pending intent, as operators see it (`list`). */
export interface PendingIntent {
  scope: OperationScope;
  attempts: number;
  lastError: string | null;
  nextAttemptAt: Date;
  giveUp: GiveUpAction | null;
  createdAt: Date;
  /** The last recorded step (`call:<name>` while a call ran). */
  recoveryPoint: string | null;
  /** The holder's lease end; past it, the intent is abandoned. */
  lockedUntil: Date | null;
}

/** Options of `createCompleter`. */
export interface CompleterOptions<Client = unknown> {
  /** The `Idem` whose defined operations (`idem.define`) this completer finishes. */
  idem: Idem<Client>;
  /**
   * How often an idle completer looks for abandoned intents, in ms. Default 1000. An intent is
   * resumed at most this long after its holder's lease lapsed (the lease is `leaseMs` of the
   * `Idem`, 30 s by default).
   */
  pollIntervalMs?: number;
  /** Intents taken per round. Default 10; they run one after another. */
  batchSize?: number;
  /**
   * Wait before trying again an intent whose attempt failed with a transient error, by attempts
   * so far. Default: exponential from 1 s to 5 min, equal jitter.
   */
  backoff?: BackoffOptions;
  /**
   * Where the completer reports: a `completion` event per intent's attempt, and the errors of a
   * round itself (the database down: the worker waits and goes on) as `error` events with source
   * `completer`, where `round`. Default: the `Idem`'s channel (`idem.events`).
   */
  events?: IdemEvents;
}

/** Finishes abandoned defined operations. Create it with `createCompleter`. */
export class Completer<Client = unknown> extends PollingWorker {
  private readonly idem: Idem<Client>;
  private readonly batchSize: number;
  private readonly pollIntervalMs: number;
  private readonly retryDelay: (attempts: number) => number;
  private readonly events: IdemEvents;

  constructor(options: CompleterOptions<Client>) {
    const events = options.events ?? options.idem.events;
    super({
      clock: options.idem.clock,
      pollIntervalMs: () => this.pollIntervalMs,
      onError: (error) => events.emit('error', { source: 'completer', where: 'round', error }),
      round: async () => {
        const done = (await this.runOnce()).length;
        return { idleMs: done < this.batchSize ? this.pollIntervalMs : 0 };
      },
    });
    this.idem = options.idem;
    this.batchSize = positiveInteger('batchSize', options.batchSize ?? 10);
    this.pollIntervalMs = positive('pollIntervalMs', options.pollIntervalMs ?? 1000);
    this.retryDelay = createBackoff(options.backoff, { baseMs: 1000, maxMs: 300_000, jitter: 'equal' });
    this.events = events;
  }

  /** One round: takes the due intents and runs each once. Returns what became of them. */
  async runOnce(): Promise<Completion[]> {
    const names = [...this.idem.defined.keys()];
    if (names.length === 0) return [];
    const now = this.idem.clock.now();
    const rows = await this.idem.intentStatements.takeDue(this.idem.sql, {
      now,
      operations: names,
      limit: this.batchSize,
      takenUntil: now + this.idem.leaseMs,
    });
    const completions: Completion[] = [];
    for (const row of rows) completions.push(await this.complete(row));
    return completions;
  }

  /** Runs rounds until none finds work (bounded by `maxRounds`): for tests, scripts and cron. */
  drain(options: { maxRounds?: number } = {}): Promise<Completion[]> {
    return drainRounds(() => this.runOnce(), options.maxRounds);
  }

  /**
   * Pending intents of defined operations, oldest first, with their attempts and last error:
   * what is waiting for its holder, or for this completer.
   */
  list(options: { limit?: number; operation?: string } = {}): Promise<PendingIntent[]> {
    return listIntents(this.idem, options);
  }

  /**
   * An operator's decision for one intent that cannot complete: `'compensate'` (its definition's
   * compensation runs) or `'fail'` (it ends failed, and every retry of its key gets
   * `StepFailedError`), carried out by a completer's next round once its holder's lease has
   * lapsed; `null` withdraws it. Resolves false when the key has no pending intent.
   */
  giveUp(scope: OperationScope, action: GiveUpAction | null): Promise<boolean> {
    return decideIntent(this.idem, scope, action);
  }

  private async complete(row: DueIntentRow): Promise<Completion> {
    const scope = { tenant: row.tenant_id, operation: row.operation, key: row.idempotency_key };
    const definition = this.idem.defined.get(row.operation);
    const attempts = row.attempts;
    const report = (completion: Completion): Completion => {
      this.events.emit('completion', completion);
      return completion;
    };
    if (!definition) return report({ scope, kind: 'skipped', attempts });
    const policy = definition.giveUp;
    const action: GiveUpAction | null =
      row.give_up ?? (policy && attempts > policy.afterAttempts ? policy.action : null);
    const input = { json: row.input, meta: row.input_meta };
    try {
      if (action === 'compensate' && !definition.compensates) {
        const failure = `gave up after ${attempts - 1} attempts: no compensation defined${
          row.last_error ? `; last error: ${row.last_error}` : ''
        }`;
        const failed = await this.idem.resumeIntent(definition, scope, input, 'fail', failure);
        return report({ scope, kind: failed ? 'failed' : 'skipped', attempts, error: failure });
      }
      if (action === 'fail') {
        const failure = `ended failed after ${attempts - 1} attempts${
          row.give_up ? ' by an operator' : ''
        }${row.last_error ? `; last error: ${row.last_error}` : ''}`;
        const failed = await this.idem.resumeIntent(definition, scope, input, 'fail', failure);
        return report({ scope, kind: failed ? 'failed' : 'skipped', attempts, error: failure });
      }
      const mode = action === 'compensate' ? 'compensate' : 'resume';
      const result = await this.idem.resumeIntent(definition, scope, input, mode, row.last_error);
      if (result === null) return report({ scope, kind: 'skipped', attempts });
      return report({ scope, kind: mode === 'compensate' ? 'compensated' : 'completed', attempts });
    } catch (error) {
      if (isStepFailed(error)) {
        return report({ scope, kind: 'failed', attempts, error: error.failure });
      }
      if (isFenced(error)) return report({ scope, kind: 'skipped', attempts });
      const retryInMs = this.retryDelay(attempts);
      const text = describeFailure(error);
      // Its lease was released by the failed attempt; the intent waits out the backoff.
      await this.idem.intentStatements
        .postpone(this.idem.sql, { scope, dueAt: this.idem.clock.now() + retryInMs, error: text })
        .catch(() => undefined); // the database is down: the intent comes due after a lease instead
      return report({ scope, kind: 'retrying', attempts, retryInMs, error: text });
    }
  }
}

/**
 * Pending intents of defined operations, oldest first (`limit`, default 100; `operation` to keep
 * one): for operators, the CLI (`idem intents list`) and the console.
 */
export async function listIntents<Client>(
  idem: Idem<Client>,
  options: { limit?: number; operation?: string } = {},
): Promise<PendingIntent[]> {
  const rows = await idem.intentStatements.list(idem.sql, {
    limit: positiveInteger('limit', options.limit ?? 100),
    operation: options.operation ?? null,
  });
  return rows.map((r) => ({
    scope: { tenant: r.tenant_id, operation: r.operation, key: r.idempotency_key },
    attempts: r.attempts,
    lastError: r.last_error,
    nextAttemptAt: new Date(r.next_attempt_at),
    giveUp: r.give_up,
    createdAt: new Date(r.created_at),
    recoveryPoint: r.recovery_point,
    lockedUntil: r.locked_until === null ? null : new Date(r.locked_until),
  }));
}

/** Records an operator's decision for one pending intent (see `Completer.giveUp`). */
export async function decideIntent<Client>(
  idem: Idem<Client>,
  scope: OperationScope,
  action: GiveUpAction | null,
): Promise<boolean> {
  validateName('tenant', scope.tenant);
  validateName('operation', scope.operation);
  validateKey(scope.key, 1);
  if (action !== null && action !== 'compensate' && action !== 'fail') {
    throw new InvalidArgumentError("the decision must be 'compensate', 'fail' or null");
  }
  return idem.intentStatements.decide(idem.sql, { scope, action, now: idem.clock.now() });
}

/**
 * Creates a completer for the defined operations of `options.idem`. Start it with the
 * application (`await completer.start()`), stop it on shutdown (`await completer.stop()`): one
 * per process is enough, and several processes may each run one (they never take the same intent).
 *
 * @example
 * const createPayment = idem.define('create-payment', paymentBody);
 * const completer = createCompleter({ idem });
 * await completer.start();
 */
export function createCompleter<Client>(options: CompleterOptions<Client>): Completer<Client> {
  return new Completer(options);
}

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /**
     * A completer attempted one abandoned intent (`drain()` returns the same): it `completed`,
     * `compensated`, ended `failed`, is `retrying` after a transient error (`retryInMs`, `error`),
     * or was `skipped` (finished meanwhile, or its holder is alive).
     */
    completion: Completion;
  }
}
