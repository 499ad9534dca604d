import { systemClock, type Clock } from '../core/clock.js';
import { currentCausation } from '../core/causation.js';
import { InProgressError, InvalidArgumentError, isInProgress, KeyReusedError } from '../core/errors.js';
import { fingerprint } from '../core/fingerprint.js';
import { validateKey, validateName } from '../core/keys.js';
import type { Queryable, Sql } from '../core/sql.js';
import type { SweepOptions, SweepResult } from '../core/sweeper.js';
import { defaultSchema } from '../core/schema-name.js';
import { positive } from '../core/validate.js';
import type { BackoffOptions } from '../core/resilience/backoff.js';
import type { SagaDefinition, SagaPoint, SagaRef } from './definition.js';
import { SagaFailedError, SagaStuckError, isSagaFailed, isSagaStuck } from './errors.js';
import {
  Halt,
  SagaExecution,
  sagaScope,
  type SagaEngine,
  type SagaResult,
  type SagaStart,
} from './execution.js';
import { decodeSaga, decodeStep, sagaRefOf, type SagaRecord, type SagaStatus } from './saga-record.js';
import { renderSagaStatements, type SagaStatements } from './statements.js';
import { sweepSagas } from './sweep.js';
import { leaseTimings } from '../steps/lease.js';
import type { StoreOptions } from '../core/store.js';
import { createEvents, type IdemEvents } from '../core/event-channel.js';

/** Options of `createSagas`. */
export interface SagasOptions<Client = unknown> extends StoreOptions<Client> {
  /**
   * Lease of the process driving a saga; another process may take the saga over after it
   * lapses. Renewed at every step, and every `heartbeatMs` while a call runs, so a call may take
   * longer than the lease. Default 30000 ms. A local action's transaction row-locks the saga, so a
   * takeover cannot cut into it; a call is fenced instead (its result is refused after a takeover).
   */
  leaseMs?: number;
  /**
   * While an action or compensation written as `{ call }` runs, a background heartbeat renews the
   * lease this often, on `clock`; if a renewal finds the saga taken over, the call's `signal` is
   * aborted. Default `leaseMs / 3` (10000 ms): two beats may fail before the lease lapses. Must be
   * less than `leaseMs`.
   */
  heartbeatMs?: number;
  /** Attempts of an action on retryable failures, in this process, before the saga turns back. Default 3. */
  actionAttempts?: number;
  /**
   * Failed attempts of one compensation, counted durably across processes, before the saga is
   * parked as `stuck` for an operator. Default 5.
   */
  compensationAttempts?: number;
  /** Decorrelated-jitter backoff between attempts. Defaults: 100 ms initial, 10000 ms max. */
  backoff?: BackoffOptions;
  /**
   * The longest wait an error's `retryAfterMs` (a downstream's Retry-After) may ask for before the
   * next attempt; a longer ask is capped to it. Default 30000.
   */
  maxRetryAfterMs?: number;
  /** Definitions `recover` and `retry` may resume, by name. `run` registers its own too. */
  sagas?: SagaDefinition<never, unknown, Client>[];
  /**
   * Fault injection for tests and drills: `at` is awaited at every point a saga passes. If it
   * throws, the engine stops where it is, writes nothing more, and `run` rethrows that error,
   * exactly as if the process had died there (open step transactions roll back).
   */
  hooks?: { at(point: SagaPoint, saga: SagaRef): void | Promise<void> };
  /**
   * How long a finished (completed or compensated) saga is kept before `sweep` deletes it with
   * its steps. A retry of the same key inside this window replays the outcome; after it, the key
   * is new and the saga runs again. Default 30 days: choose at least your callers' replay horizon.
   */
  retentionMs?: number;
}

/** What `run` needs besides the definition. */
export interface SagaRunSpec<I> {
  tenant: string;
  /** The intent, e.g. `order-123`. A retry of the same intent must use the same key. */
  key: string;
  /** JSON-serialisable input. The same key with another input is refused (`KeyReusedError`). */
  input: I;
}

/** What `runIn` did: the saga it names, and whether this call inserted it. */
export interface SagaStarted {
  saga: SagaRef;
  /** False when the key existed (started before, in any state). */
  created: boolean;
}

/** Options of `list`. */
export interface ListSagasOptions {
  /** Default `['stuck']`: what an operator must look at. */
  status?: SagaStatus[];
  saga?: string;
  /** Default 100. */
  limit?: number;
  /** Include each saga's steps. Default false. */
  steps?: boolean;
}

/** What `recover` did with one saga. */
export interface RecoveredSaga {
  saga: SagaRef;
  outcome: 'completed' | 'compensated' | 'stuck' | 'busy' | 'unknown-definition' | 'error';
  error?: unknown;
}

/**
 * Sagas with persisted compensations and derived keys, on PostgreSQL.
 *
 * @example
 * const sagas = createSagas({ sql: fromPg(pool), sagas: [checkout] });
 * try {
 *   const { value } = await sagas.run(checkout, { tenant: 'acme', key: `order-${id}`, input });
 * } catch (e) {
 *   if (isSagaFailed(e)) … // a step failed; every started step was compensated
 * }
 * // in a background loop: resume sagas whose process died
 * await sagas.recover();
 */
export class Sagas<Client = unknown> {
  readonly sql: Sql<Client>;
  readonly schema: string;
  readonly clock: Clock;
  readonly leaseMs: number;
  readonly heartbeatMs: number;
  readonly actionAttempts: number;
  readonly compensationAttempts: number;
  readonly maxRetryAfterMs: number;
  readonly backoff: BackoffOptions | undefined;
  readonly hooks: SagasOptions<Client>['hooks'];
  /** Where the sagas report (`StoreOptions.events`): `saga:stuck` when one is parked. */
  readonly events: IdemEvents;
  readonly retentionMs: number;
  private readonly statements: SagaStatements;
  /** What every execution reads: the settings above, the statements and the step runner. */
  private readonly engine: SagaEngine<Client>;
  private readonly definitions = new Map<string, SagaDefinition<never, unknown, Client>>();

  constructor(options: SagasOptions<Client>) {
    this.sql = options.sql;
    this.schema = options.schema ?? defaultSchema;
    this.statements = renderSagaStatements(this.schema);
    this.clock = options.clock ?? systemClock;
    ({ leaseMs: this.leaseMs, heartbeatMs: this.heartbeatMs } = leaseTimings(options, 30_000));
    this.actionAttempts = positive('actionAttempts', options.actionAttempts ?? 3);
    this.compensationAttempts = positive('compensationAttempts', options.compensationAttempts ?? 5);
    this.maxRetryAfterMs = options.maxRetryAfterMs ?? 30_000;
    this.backoff = options.backoff;
    this.hooks = options.hooks;
    this.events = options.events ?? createEvents();
    this.retentionMs = positive('retentionMs', options.retentionMs ?? 30 * 86_400_000);
    this.engine = {
      sql: this.sql,
      statements: this.statements,
      runner: { sql: this.sql, clock: this.clock, heartbeatMs: this.heartbeatMs },
      clock: this.clock,
      leaseMs: this.leaseMs,
      actionAttempts: this.actionAttempts,
      compensationAttempts: this.compensationAttempts,
      backoff: this.backoff,
      maxRetryAfterMs: this.maxRetryAfterMs,
      hooks: this.hooks,
      events: this.events,
    };
    for (const definition of options.sagas ?? []) this.register(definition);
  }

  /**
   * Deletes finished sagas older than `retentionMs` (by finish time), with their steps, in
   * bounded batches that skip locked rows. Running, compensating and stuck sagas are never
   * touched. Run it from a scheduler, or with `idem sweep`. Answers `{ deleted, cleared }` (`cleared` is
   * always 0: a saga is kept whole or deleted).
   */
  sweep(options: SweepOptions = {}): Promise<SweepResult> {
    return sweepSagas(this.sql, this.clock, this.statements, this.retentionMs, options);
  }

  /** Makes a definition resumable by `recover` and `retry`. */
  register<I, O>(definition: SagaDefinition<I, O, Client>): void {
    const known = this.definitions.get(definition.name);
    if (known && known !== (definition as unknown)) {
      throw new InvalidArgumentError(`another saga definition is registered as ${definition.name}`);
    }
    this.definitions.set(definition.name, definition);
  }

  /**
   * Runs the saga once per (tenant, name, key). A first call drives it to the end. A retry of a
   * completed saga returns the stored result (`replayed`); of a compensated one, rethrows
   * `SagaFailedError`; of a stuck one, `SagaStuckError`; of one still running elsewhere,
   * `InProgressError` (try later); of one whose process died, or one started by `runIn` whose
   * transaction committed, takes it over and drives it, forward or backward, where its durable
   * cursor says.
   *
   * Throws `SagaFailedError` when a step failed for good and all started steps were compensated,
   * `SagaStuckError` when a compensation kept failing, `FencedError` when this process lost the
   * saga to a takeover mid-run.
   *
   * @example
   * const sagas = createSagas({ sql: fromPg(pool), sagas: [checkout] });
   * try {
   *   const { value } = await sagas.run(checkout, { tenant: 'acme', key: `order-${orderId}`, input });
   * } catch (error) {
   *   if (isSagaFailed(error)) return refuse(error.failure); // every started step was compensated
   *   throw error;
   * }
   */
  async run<I, O>(definition: SagaDefinition<I, O, Client>, spec: SagaRunSpec<I>): Promise<SagaResult<O>> {
    const begun = await this.begin(this.sql, definition, spec, this.clock.now() + this.leaseMs);
    if (begun.created) return this.drive(fresh(definition, begun.saga, begun.input));
    return this.resumeExisting(definition, begun.saga, begun.fingerprint);
  }

  /**
   * Starts the saga inside the caller's transaction (`tx` first, as in every `…In` method): the
   * saga, its input and its key commit with the caller's writes, or not at all. No step runs
   * here: steps are short transactions of their own and calls between them, which never run
   * inside a caller's transaction. Once the caller commits, `run(definition, spec)` with the same
   * spec drives it at once (its lease is unset, so the takeover needs no wait; `resumed` is true),
   * and `recover()` drives it if the process dies before (if a recoverer takes it first, `run`
   * answers `InProgressError` until it is done, then its outcome). The same key again returns
   * `created: false`; with another input it throws `KeyReusedError`.
   *
   * @example
   * await sql.transaction(async (tx) => {
   *   await tx.query('INSERT INTO orders (id) VALUES ($1)', [orderId]);
   *   await sagas.runIn(tx, checkout, { tenant: 'acme', key: `order-${orderId}`, input });
   * });
   * const { value } = await sagas.run(checkout, { tenant: 'acme', key: `order-${orderId}`, input });
   */
  async runIn<I, O>(
    tx: Queryable,
    definition: SagaDefinition<I, O, Client>,
    spec: SagaRunSpec<I>,
  ): Promise<SagaStarted> {
    const begun = await this.begin(tx, definition, spec, null);
    if (!begun.created) {
      const stored = (await this.statements.read(tx, begun.saga))?.fingerprint as string | undefined;
      if (stored !== undefined && stored !== begun.fingerprint) {
        throw new KeyReusedError(sagaScope(begun.saga), stored, begun.fingerprint);
      }
    }
    return { saga: begun.saga, created: begun.created };
  }

  /**
   * Validates the spec, registers the definition and inserts the saga unless its key exists, on
   * `db`. `leaseUntil` null leaves the lease unset: any process may take the saga over.
   */
  private async begin<I, O>(
    db: Queryable,
    definition: SagaDefinition<I, O, Client>,
    spec: SagaRunSpec<I>,
    leaseUntil: number | null,
  ): Promise<{ saga: SagaRef; input: I; fingerprint: string; created: boolean }> {
    validateName('tenant', spec.tenant);
    validateKey(spec.key);
    this.register(definition);
    const saga: SagaRef = { tenant: spec.tenant, saga: definition.name, key: spec.key };
    const inputJson = JSON.stringify(spec.input ?? null);
    const print = fingerprint(spec.input ?? null);
    const inserted = await this.statements.insert(db, {
      ref: saga,
      fingerprint: print,
      input: inputJson,
      leaseUntil: leaseUntil === null ? null : new Date(leaseUntil),
      now: new Date(this.clock.now()),
      cause: currentCausation(),
    });
    if (inserted) await this.hook({ at: 'saga:started' }, saga);
    // The input is used as stored (parsed from JSON), so a resumed run sees exactly what a first run saw.
    return { saga, input: JSON.parse(inputJson) as I, fingerprint: print, created: inserted !== null };
  }

  /**
   * Takes over a saga whose process died (lease lapsed) and drives it to a final state. Used by
   * `recover`; call it directly to push one saga along. Returns the final record.
   */
  async resume(ref: SagaRef): Promise<SagaRecord> {
    const definition = this.definitions.get(ref.saga);
    if (!definition) throw new InvalidArgumentError(`no saga definition registered as ${ref.saga}`);
    try {
      await this.resumeExisting(definition, ref, null);
    } catch (error) {
      if (!isSagaFailed(error)) throw error;
    }
    return (await this.get(ref))!;
  }

  /**
   * Resumes every unfinished saga whose lease lapsed (its process died), up to `limit`. Run it
   * periodically (or at start-up) in one or more processes: concurrent recoverers take disjoint
   * sagas through the fence, and a busy saga is left to its holder.
   */
  async recover(options: { limit?: number } = {}): Promise<RecoveredSaga[]> {
    const rows = await this.statements.lapsed(this.sql, {
      now: new Date(this.clock.now()),
      limit: options.limit ?? 100,
    });
    const outcomes: RecoveredSaga[] = [];
    for (const row of rows) {
      const ref = sagaRefOf(row);
      if (!this.definitions.has(ref.saga)) {
        outcomes.push({ saga: ref, outcome: 'unknown-definition' });
        continue;
      }
      try {
        const record = await this.resume(ref);
        outcomes.push({ saga: ref, outcome: record.status === 'completed' ? 'completed' : 'compensated' });
      } catch (error) {
        if (isSagaStuck(error)) outcomes.push({ saga: ref, outcome: 'stuck', error });
        else if (isInProgress(error)) outcomes.push({ saga: ref, outcome: 'busy' });
        else outcomes.push({ saga: ref, outcome: 'error', error });
      }
    }
    return outcomes;
  }

  /**
   * An operator's retry of a stuck saga, once the cause is fixed: resets the failing
   * compensation's attempt count and compensates onward. Returns the final record
   * (`compensated`); throws `SagaStuckError` if it gets stuck again.
   */
  async retry(ref: SagaRef): Promise<SagaRecord> {
    const definition = this.definitions.get(ref.saga);
    if (!definition) throw new InvalidArgumentError(`no saga definition registered as ${ref.saga}`);
    const now = this.clock.now();
    const unstuck = await this.sql.transaction(async (tx) => {
      const row = await this.statements.unstick(tx, {
        ref,
        leaseUntil: new Date(now + this.leaseMs),
        now: new Date(now),
      });
      if (row) await this.statements.resetCompensationAttempts(tx, { ref, position: row.cursor });
      return row;
    });
    if (!unstuck) throw new InvalidArgumentError(`saga ${ref.saga} ${ref.key} is not stuck`);
    const record = (await this.get(ref, { steps: true }))!;
    try {
      await this.drive(
        taken(definition, ref, record.input as never, {
          ...unstuck,
          status: 'compensating',
          error: record.error,
        }),
        record.steps,
      );
    } catch (error) {
      if (!isSagaFailed(error)) throw error;
    }
    return (await this.get(ref))!;
  }

  /** Reads one saga (with its steps when asked), or null. */
  async get(ref: SagaRef, options: { steps?: boolean } = {}): Promise<SagaRecord | null> {
    const row = await this.statements.read(this.sql, ref);
    if (!row) return null;
    const record = decodeSaga(row);
    if (options.steps) record.steps = await this.readSteps(ref);
    return record;
  }

  /** Lists sagas by status, oldest change first. Default: the stuck ones. */
  async list(options: ListSagasOptions = {}): Promise<SagaRecord[]> {
    const rows = await this.statements.list(this.sql, {
      statuses: options.status ?? ['stuck'],
      saga: options.saga ?? null,
      limit: options.limit ?? 100,
    });
    const records = rows.map(decodeSaga);
    if (options.steps) for (const r of records) r.steps = await this.readSteps(r);
    return records;
  }

  private async readSteps(ref: SagaRef) {
    return (await this.statements.readSteps(this.sql, ref)).map(decodeStep);
  }

  private async resumeExisting<I, O>(
    definition: SagaDefinition<I, O, Client>,
    ref: SagaRef,
    print: string | null,
  ): Promise<SagaResult<O>> {
    const record = await this.get(ref);
    if (!record) throw new InvalidArgumentError(`saga ${ref.saga} ${ref.key} does not exist`);
    if (print !== null && record.fingerprint !== print) {
      throw new KeyReusedError(sagaScope(ref), record.fingerprint, print);
    }
    const now = this.clock.now();
    switch (record.status) {
      case 'completed':
        return { value: record.result as O, replayed: true, resumed: false };
      case 'compensated':
        throw new SagaFailedError(
          ref,
          record.error ?? 'unknown failure',
          new Error(record.error ?? ''),
          true,
        );
      case 'stuck': {
        const steps = await this.readSteps(ref);
        const stuckStep = steps.find((s) => s.position === record.cursor)?.name ?? null;
        throw new SagaStuckError(ref, stuckStep, new Error(record.stuckError ?? 'stuck'));
      }
      default:
        break;
    }
    if (record.lockedUntil !== null && record.lockedUntil > now) {
      throw new InProgressError(sagaScope(ref), Math.max(1, record.lockedUntil - now));
    }
    const claimed = await this.statements.takeOver(this.sql, {
      ref,
      fence: record.fence,
      leaseUntil: new Date(now + this.leaseMs),
      now: new Date(now),
    });
    if (!claimed) throw new InProgressError(sagaScope(ref), 1000); // another process took it first
    // Steps are read after the takeover: from here on the previous holder can write nothing.
    return this.drive(taken(definition, ref, record.input as I, claimed), await this.readSteps(ref));
  }

  private async drive<I, O>(
    start: Omit<SagaStart<I, O, Client>, 'steps'>,
    steps: SagaStart<I, O, Client>['steps'] = [],
  ): Promise<SagaResult<O>> {
    try {
      return await new SagaExecution(this.engine, { ...start, steps }).execute();
    } catch (error) {
      if (error instanceof Halt) throw error.error;
      throw error;
    }
  }

  private async hook(point: SagaPoint, ref: SagaRef): Promise<void> {
    await this.hooks?.at(point, ref);
  }
}

/**
 * Creates a saga engine for one database and schema. See `SagasOptions` for the defaults.
 *
 * @example
 * const sagas = createSagas({ sql: fromPg(pool), sagas: [checkout] });
 * setInterval(() => void sagas.recover(), 10_000); // resume sagas whose process died
 */
export function createSagas<Client>(options: SagasOptions<Client>): Sagas<Client> {
  return new Sagas(options);
}

/** A saga this process just inserted: fence 1, forward from the first step. */
function fresh<I, O, Client>(
  definition: SagaDefinition<I, O, Client>,
  ref: SagaRef,
  input: I,
): Omit<SagaStart<I, O, Client>, 'steps'> {
  return { definition, ref, input, fence: 1, status: 'running', cursor: 0, failure: null, resumed: false };
}

/** A saga this process took over (or an operator unstuck), where its claimed row says. */
function taken<I, O, Client>(
  definition: SagaDefinition<I, O, Client>,
  ref: SagaRef,
  input: I,
  row: { fence: unknown; status: string; cursor: unknown; error: string | null },
): Omit<SagaStart<I, O, Client>, 'steps'> {
  return {
    definition,
    ref,
    input,
    fence: Number(row.fence),
    status: row.status as 'running' | 'compensating',
    cursor: Number(row.cursor),
    failure: row.error,
    resumed: true,
  };
}

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /**
     * A saga was parked as `stuck`: a compensation failed `compensationAttempts` times. It waits
     * for an operator (`retry`, `list`); the event is for alerting. `error` is what the last
     * attempt threw.
     */
    'saga:stuck': { saga: SagaRef; step: string; error: unknown };
  }
}
