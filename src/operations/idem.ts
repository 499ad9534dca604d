import { systemClock, type Clock } from '../core/clock.js';
import {
  InvalidArgumentError,
  isCommitOutcomeUnknown,
  isIdemError,
  isPreparedStatementsUnsupported,
  OperationFailedError,
  type OperationScope,
  type StepFailedError,
} from '../core/errors.js';
import { fingerprint as computeFingerprint } from '../core/fingerprint.js';
import { deriveKey, validateKey, validateName } from '../core/keys.js';
import { createBackoff } from '../core/resilience/backoff.js';
import { classifyFailure } from '../core/failures.js';
import { isRetryable } from '../core/retryable.js';
import { canCommitWith, queryAndCommit, type Queryable, type Sql, type Transaction } from '../core/sql.js';
import { isTransactionRetryable, SqlState, sqlStateOf } from '../core/sqlstate.js';
import { defaultSchema } from '../core/schema-name.js';
import { nonNegative, positive } from '../core/validate.js';
import { observe } from '../observability/events.js';
import { createEvents, type IdemEvents } from '../core/event-channel.js';
import { MultiStepRun, type MultiStepEnvironment, type MultiStepOperation } from './multi-step.js';
import {
  makeDefinition,
  type OperationDefinition,
  type DefineOptions,
  type DefinedBody,
  type DefinedSpec,
  type DefinitionHost,
} from './definitions.js';
import { renderIntentStatements, type IntentStatements } from './intent-statements.js';
import { decodeResult, encodeResult } from '../steps/result-codec.js';
import {
  defaultRetention,
  type IdemOptions,
  type OperationSpec,
  type ReadFirst,
  type Recording,
} from './options.js';
import { freshResult, toOutcome, type OperationResult, type Outcome } from './outcome.js';
import { ReplayReadPolicy } from './replay-read.js';
import { decide, inProgress } from './resolve-existing.js';
import type { RequestRow } from './request-row.js';
import { RequestStore, type PreparedSpec } from './request-store.js';
import { sweep, type SweepOptions, type SweepResult } from './sweep.js';
import { leaseTimings } from '../steps/lease.js';

export type { PreparedSpec } from './request-store.js';

/** Passed to a handler beside the transaction. */
export interface OperationContext {
  scope: OperationScope;
  /** A key for downstream calls, derived from this intent and `name`; stable across retries. */
  deriveKey(name: string): string;
}

type Handler<T, TxClient> = (tx: Transaction<TxClient>, context: OperationContext) => Promise<T | Outcome<T>>;

/**
 * Thrown inside a commit-time recording transaction when the key already has a row that is not
 * ours to overwrite: it rolls this execution's writes back, and the caller then answers from the
 * row (a replay), waits for it (pending), or runs afresh (the row went away).
 */
class KeyTaken extends Error {
  /**
   * @param row the key's row, read in the transaction; null when it could not be.
   * @param unread the transaction ended with the record (pipelined with COMMIT): read the row anew.
   */
  constructor(
    readonly row: RequestRow | null,
    readonly unread = false,
  ) {
    super('the idempotency key was recorded by another execution');
  }
}

/** What the caller of `executeAndRecord` learns about a failed attempt. */
interface Execution {
  /** The handler threw (as opposed to idem's statements or COMMIT). */
  handlerFailed: boolean;
  /**
   * idem opened the transaction and may end it by sending the record with COMMIT, when the
   * adapter can (`queryAndCommit`). Never in `runIn`: that transaction is the caller's.
   */
  mayCommit?: boolean;
}

/** The savepoint `runIn` rolls back to when another execution recorded the key first. */
const recordSavepoint = 'idem_record';

/**
 * Keyed operations on one database. Create it once per process with `createIdem`.
 *
 * @example
 * const idem = createIdem({ sql: fromPg(pool) });
 * const { value, replayed } = await idem.run(
 *   { tenant: 'acme', operation: 'create-order', key, request: body },
 *   async (tx) => {
 *     const { rows } = await tx.query('INSERT INTO orders (total) VALUES ($1) RETURNING id', [body.total]);
 *     return { orderId: rows[0].id };
 *   },
 * );
 */
export class Idem<Client = unknown> implements DefinitionHost<Client> {
  readonly sql: Sql<Client>;
  readonly schema: string;
  readonly clock: Clock;
  private readonly store: RequestStore;
  /** The lease of a multi-step operation's holder (`IdemOptions.leaseMs`). */
  readonly leaseMs: number;
  private readonly heartbeatMs: number;
  private readonly waitMs: number;
  private readonly minKeyLength: number;
  private readonly transactionRetries: number;
  private readonly retention: IdemOptions['retention'];
  private readonly recording: Recording;
  private readonly readFirst: ReadFirst;
  private readonly replayRead = new ReplayReadPolicy();
  /**
   * Where this `Idem` reports (`StoreOptions.events`): an `operation` event per call; its
   * completer's `completion` events and errors too, unless given a channel of its own.
   */
  readonly events: IdemEvents;
  /** The statements of defined operations' kept inputs (`intents`). */
  readonly intentStatements: IntentStatements;
  private readonly definitions = new Map<string, OperationDefinition<never, unknown, never>>();

  constructor(options: IdemOptions<Client>) {
    this.sql = options.sql;
    this.schema = options.schema ?? defaultSchema;
    this.clock = options.clock ?? systemClock;
    this.store = new RequestStore(this.schema, this.clock);
    this.waitMs = nonNegative('waitMs', options.waitMs ?? 5000);
    ({ leaseMs: this.leaseMs, heartbeatMs: this.heartbeatMs } = leaseTimings(options, 30_000));
    this.minKeyLength = positive('minKeyLength', options.minKeyLength ?? 1);
    this.transactionRetries = nonNegative('transactionRetries', options.transactionRetries ?? 3);
    this.retention = options.retention;
    this.recording = recordingOf(options.recording ?? 'commit');
    this.readFirst = readFirstOf(options.readFirst ?? 'auto');
    this.events = options.events ?? createEvents();
    this.intentStatements = renderIntentStatements(this.schema);
  }

  /**
   * Runs `handler` once per intent, in a transaction idem opens. The key's record, the handler's
   * writes and the stored result commit together. A retry of a finished key returns the stored
   * result (without running the handler when the read in front is on, see `readFirst`). Throws
   * `KeyReusedError`, `InProgressError`, `ExpiredError`, `InvalidKeyError`, or
   * `OperationFailedError` (with `retryable` and the handler's error as `cause`); a handler's throw
   * leaves nothing behind. Serialization failures and deadlocks retry the whole transaction up to
   * `transactionRetries` times.
   *
   * Every effect of `handler` must be a write in `tx`: with `recording: 'commit'` (the default) a
   * concurrent duplicate may run it too, and its writes roll back. A handler that calls the
   * outside world belongs in `steps`, or at least in `recording: 'claim'`.
   *
   * @example
   * const { value, replayed } = await idem.run(
   *   { tenant: 'acme', operation: 'create-order', key: idempotencyKey, request: body },
   *   async (tx) => {
   *     const { rows } = await tx.query('INSERT INTO orders (total) VALUES ($1) RETURNING id', [body.total]);
   *     return { orderId: rows[0].id };
   *   },
   * );
   */
  async run<T>(spec: OperationSpec, handler: Handler<T, Client>): Promise<OperationResult<T>> {
    const prepared = this.prepare(spec);
    return observe('idem.run', prepared.scope, this.events, () =>
      this.classifying(() => this.runPrepared(prepared, handler)),
    );
  }

  /** Runs `work`, turning whatever it throws into what the caller sees (an `IdemError`). */
  private async classifying<R>(work: () => Promise<R>): Promise<R> {
    try {
      return await work();
    } catch (error) {
      throw this.classify(error);
    }
  }

  private async runPrepared<T>(
    prepared: PreparedSpec,
    handler: Handler<T, Client>,
  ): Promise<OperationResult<T>> {
    const { scope } = prepared;
    const deadline = this.clock.now() + prepared.waitMs;
    // Fast path: a finished key is answered by one indexed read, with no transaction.
    let front: OperationResult<T> | 'row' | null;
    try {
      front = await this.replayInFront<T>(this.sql, prepared, deadline);
    } catch (error) {
      // The read only saves a transaction. One that met a connection that just went away (a
      // failover, a restarted pooler, a terminated backend) is skipped: the transaction runs on
      // another connection, and does the same work without it.
      if (isIdemError(error) || !isRetryable(error)) throw error;
      front = null;
    }
    if (typeof front === 'object' && front !== null) return front;
    const byCommit = prepared.recording === 'commit';
    // The record may go out with COMMIT unless the key has a row to take over (its tombstone
    // passed): only a record that waits for its answer inside the transaction can do that. Known
    // from the read in front, or learnt from a pipelined record that found the row (one wasted,
    // rolled-back run of the handler in that rare case).
    let mayCommit = front !== 'row';
    for (let attempt = 0; ; attempt++) {
      const execution: Execution = { handlerFailed: false, mayCommit };
      try {
        const result = await this.sql.transaction((tx) =>
          byCommit
            ? this.executeAndRecord(tx, prepared, handler, execution)
            : this.claimAndRun(tx, tx, prepared, handler),
        );
        this.replayRead.observe(scope.operation, result.replayed);
        return result;
      } catch (error) {
        if (error instanceof KeyTaken || execution.handlerFailed) {
          // Rolled back. Another execution recorded the key (found at commit), or may have (a
          // handler that failed on the first one's writes, say a unique business key): its
          // result answers. A failure at COMMIT is not read here: its outcome is unknown.
          const row =
            error instanceof KeyTaken && !error.unread
              ? error.row
              : await this.readAfterFailure(this.sql, scope);
          if (row || error instanceof KeyTaken) {
            this.replayRead.observe(scope.operation, true);
            const settled = await this.settle<T>(this.sql, prepared, row, deadline);
            if (settled) return settled;
            if (error instanceof KeyTaken) {
              mayCommit = false;
              continue; // the row went away or may be taken over: run afresh
            }
          }
        }
        if (attempt < prepared.transactionRetries && this.worthAnotherAttempt(error, attempt)) {
          await this.clock.sleep(backoff(attempt + 1));
          continue;
        }
        throw error; // classified by `run`
      }
    }
  }

  /**
   * Whether `run` tries its transaction again itself, rather than hand the failure to the caller:
   * - a serialization failure or deadlock (rolled back: the same attempt again succeeds);
   * - a pooler's prepared-statement refusal (rolled back, and `fromPg` now sends statements
   *   unnamed);
   * - COMMIT's outcome unknown (the connection died with COMMIT in flight): the next attempt
   *   reads the key, or its record meets the committed row, and answers from it; when nothing
   *   committed it runs afresh. The key's unique constraint makes both safe;
   * - once, a connection lost before COMMIT (a pooled connection a failover or a restarted pooler
   *   had cut): nothing committed, and the pool's next connection is a new one.
   * Timeouts, a full server (53300) or a read-only node (25006) are not retried here: each attempt
   * would wait as long again. The caller gets a retryable error (HTTP: 503 with Retry-After).
   */
  private worthAnotherAttempt(error: unknown, attempt: number): boolean {
    if (isTransactionRetryable(error) || isPreparedStatementsUnsupported(error)) return true;
    if (isCommitOutcomeUnknown(error)) return true;
    if (attempt > 0 || sqlStateOf(error) !== undefined) return false;
    const failure = classifyFailure(error);
    return failure.kind === 'transient' && failure.discardConnection && !failure.timedOut;
  }

  /**
   * Like `run`, inside a transaction the caller already opened (`fromPgClient(client)`,
   * `fromKysely(trx)`, …). idem's rows commit or roll back with the caller's. If this throws, the
   * caller must roll back. No automatic retry: the caller owns the transaction.
   *
   * With `recording: 'commit'` (the default) the handler runs after a savepoint: when another
   * execution recorded the key first, idem rolls back to it (undoing this handler's writes, and
   * nothing of the caller's) and returns that execution's result as a replay.
   *
   * @example
   * await knex.transaction(async (trx) => {
   *   await idem.runIn(fromKnexTransaction(trx), { tenant, operation: 'create-order', key, request: body }, async (tx) => {
   *     await tx.query('INSERT INTO orders (total) VALUES ($1)', [body.total]);
   *   });
   * });
   */
  async runIn<T, TxClient>(
    tx: Transaction<TxClient>,
    spec: OperationSpec,
    handler: Handler<T, TxClient>,
  ): Promise<OperationResult<T>> {
    const prepared = this.prepare(spec);
    return observe('idem.runIn', prepared.scope, this.events, () =>
      this.classifying(() =>
        prepared.recording === 'claim'
          ? this.claimAndRun(tx, tx, prepared, handler)
          : this.recordIn(tx, prepared, handler),
      ),
    );
  }

  /**
   * The read in front, when the operation's `readFirst` asks for it: a finished key's stored
   * result; 'row' when the key has a row that does not settle the call (one past its tombstone);
   * null otherwise (no read, or no row).
   */
  private async replayInFront<T>(
    db: Queryable,
    prepared: PreparedSpec,
    deadline: number,
  ): Promise<OperationResult<T> | 'row' | null> {
    const { scope } = prepared;
    if (!this.replayRead.shouldRead(scope.operation, prepared.readFirst)) return null;
    const row = await this.store.readRow(db, scope);
    if (!row) return null;
    this.replayRead.observe(scope.operation, true);
    return (await this.settle<T>(db, prepared, row, deadline)) ?? 'row';
  }

  /** `runIn` with commit-time recording: savepoint, handler, record; on a taken key, roll back to the savepoint. */
  private async recordIn<T, TxClient>(
    tx: Transaction<TxClient>,
    prepared: PreparedSpec,
    handler: Handler<T, TxClient>,
  ): Promise<OperationResult<T>> {
    const { scope } = prepared;
    const deadline = this.clock.now() + prepared.waitMs;
    const front = await this.replayInFront<T>(tx, prepared, deadline);
    if (typeof front === 'object' && front !== null) return front;
    for (;;) {
      await tx.query(`SAVEPOINT ${recordSavepoint}`);
      const execution: Execution = { handlerFailed: false };
      try {
        const result = await this.executeAndRecord(tx, prepared, handler, execution);
        this.replayRead.observe(scope.operation, false);
        return result;
      } catch (error) {
        if (!(error instanceof KeyTaken || execution.handlerFailed)) throw error;
        // Undo this execution's writes (and leave an aborted statement behind), keep the caller's.
        try {
          await tx.query(`ROLLBACK TO SAVEPOINT ${recordSavepoint}`);
        } catch {
          throw error; // the connection is gone: the caller rolls back
        }
        const row = error instanceof KeyTaken ? error.row : await this.readAfterFailure(tx, scope);
        if (!row && !(error instanceof KeyTaken)) throw error;
        this.replayRead.observe(scope.operation, true);
        const settled = await this.settle<T>(tx, prepared, row, deadline);
        if (settled) return settled;
        if (!(error instanceof KeyTaken)) throw error;
        // The row went away (swept, or a multi-step execution freed it): run afresh.
      }
    }
  }

  /**
   * Runs an operation whose steps touch the outside world (a card charge, an e-mail). A local step
   * (`op.step`) is one short transaction that records its result; a call (`op.call`) runs with no
   * transaction held, between two short ones. The operation holds a lease with a fencing counter.
   * After a crash, a retry of the same key takes over once the lease lapses, skips the recorded
   * steps, and reruns the interrupted one with the same derived key.
   *
   * Failures: a retryable one releases the lease, and a retry resumes at once. A non-retryable one
   * before anything was committed (no step recorded, no call started) frees the key: the retry
   * runs afresh (`OperationFailedError`). A non-retryable one after that is stored: the operation
   * ends `failed` with the error and the step, and this call and every retry of the key throw
   * `StepFailedError`. A lost lease throws `FencedError` and writes nothing.
   *
   * @example
   * const { value } = await idem.steps({ tenant, operation: 'pay', key, request: body }, async (op) => {
   *   const order = await op.step('order', (tx) => insertOrder(tx, body));
   *   const charge = await op.call('charge', ({ key, signal }) => provider.charge(body, { idempotencyKey: key, signal }));
   *   await op.step('mark-paid', (tx) => markPaid(tx, order.id, charge.id));
   *   return { orderId: order.id };
   * });
   */
  async steps<T>(
    spec: OperationSpec,
    body: (op: MultiStepOperation<Client>) => Promise<T | Outcome<T>>,
  ): Promise<OperationResult<T>> {
    const prepared = this.prepare(spec);
    return observe('idem.steps', prepared.scope, this.events, () =>
      this.classifying(() => new MultiStepRun<T, Client>(this.stepsEnvironment(), prepared, body).execute()),
    );
  }

  /**
   * Registers a multi-step operation by name, with its code, and returns its handle: `run` it
   * like `idem.steps` with an input. Its input is kept while it is pending, so a completer
   * (`createCompleter({ idem })`) can drive an intent whose holder died to its end (resumed after
   * its last recorded step, with the same derived keys, so a provider that honours keys charges
   * once), without a client's retry. Define each name once per `Idem`, at start-up, in every
   * process that runs a completer. Over HTTP, a steps-mode handler runs it with
   * `req.idem.run(definition, input)`; the body then returns `httpAnswer(…)`.
   *
   * @example
   * const createPayment = idem.define('create-payment', async (op, input: { amount: number }) => {
   *   const charge = await op.call('charge', ({ key }) => provider.charge(input.amount, { idempotencyKey: key }));
   *   await op.step('record', (tx) => tx.query('INSERT INTO payments (charge_id) VALUES ($1)', [charge.id]));
   *   return { chargeId: charge.id };
   * });
   * await createPayment.run({ tenant: 'acme', key: 'order-1001', input: { amount: 1250 } });
   */
  define<I, T>(
    name: string,
    body: DefinedBody<I, T, Client>,
    options: DefineOptions<I, T, Client> = {},
  ): OperationDefinition<I, T, Client> {
    validateName('operation', name);
    if (this.definitions.has(name)) {
      throw new InvalidArgumentError(`operation "${name}" is already defined on this Idem`);
    }
    const giveUp = options.giveUp;
    if (giveUp !== undefined) {
      positive('giveUp.afterAttempts', giveUp.afterAttempts);
      if (giveUp.action !== 'compensate' && giveUp.action !== 'fail') {
        throw new InvalidArgumentError("giveUp.action must be 'compensate' or 'fail'");
      }
      if (giveUp.action === 'compensate' && !options.compensate) {
        throw new InvalidArgumentError("giveUp.action 'compensate' needs a compensate function");
      }
    }
    const definition = makeDefinition(name, body, options, this);
    this.definitions.set(name, definition);
    return definition;
  }

  /** The operations defined on this `Idem`, by name: what a completer can finish. */
  get defined(): ReadonlyMap<string, OperationDefinition<never, unknown, never>> {
    return this.definitions;
  }

  /** Runs a defined operation (its handle's `run`). */
  runDefined<I, T>(
    definition: OperationDefinition<I, T, Client>,
    spec: DefinedSpec<I>,
  ): Promise<OperationResult<T>> {
    const input = encodeResult(spec.input, `the input of operation "${definition.name}"`);
    const prepared = this.prepare({
      tenant: spec.tenant,
      operation: definition.name,
      key: spec.key,
      // The plain-JSON part: a Date and its ISO string are one request.
      request: JSON.parse(input.json) as unknown,
      ...((spec.waitMs ?? definition.waitMs) !== undefined
        ? { waitMs: spec.waitMs ?? definition.waitMs }
        : {}),
      retention: { ...definition.retention, ...spec.retention },
    });
    const body = (op: MultiStepOperation<Client>) => definition.body(op, spec.input);
    return observe('idem.steps', prepared.scope, this.events, () =>
      this.classifying(() =>
        new MultiStepRun<T, Client>(this.stepsEnvironment(), prepared, body, { intent: input }).execute(),
      ),
    );
  }

  /**
   * For a completer: takes over the abandoned defined operation `scope` and drives it to its end
   * (`resume`: the body, after its recorded steps; `compensate`: its compensation) or ends it
   * failed (`fail`, with `failure` as the stored error). Resolves with the stored outcome, or null
   * when it is not abandoned any more (it finished, or its holder renewed its lease). Throws as
   * `idem.steps` does (`StepFailedError` when it failed for good; a retryable `IdemError` when the
   * attempt failed and the intent stays pending). Not for applications: run `createCompleter`.
   */
  async resumeIntent(
    definition: OperationDefinition<never, unknown, never>,
    scope: OperationScope,
    input: { json: string; meta: string | null },
    action: 'resume' | 'compensate' | 'fail',
    failure: string | null,
  ): Promise<OperationResult<unknown> | StepFailedError | null> {
    const prepared = this.prepare({
      ...scope,
      fingerprint: 'resumed',
      ...(definition.retention ? { retention: definition.retention } : {}),
    });
    const value = decodeResult(input.json, input.meta) as never;
    const erased = definition as unknown as OperationDefinition<never, unknown, Client>;
    const body = (op: MultiStepOperation<Client>) =>
      action === 'compensate' ? erased.compensate(op, value, failure) : erased.body(op, value);
    const run = new MultiStepRun<unknown, Client>(this.stepsEnvironment(), prepared, body, { intent: input });
    if (action === 'fail') {
      return this.classifying(() => run.failAbandoned(failure ?? 'ended failed by an operator'));
    }
    // Not observed as a client's call: the completer reports its own events.
    return this.classifying(() => run.resumeAbandoned());
  }

  private stepsEnvironment(): MultiStepEnvironment<Client> {
    return {
      sql: this.sql,
      store: this.store,
      leaseMs: this.leaseMs,
      heartbeatMs: this.heartbeatMs,
      intents: this.intentStatements,
    };
  }

  /** Reads a key's row, or null. For tools and tests. */
  get(scope: OperationScope): Promise<RequestRow | null> {
    return this.store.readRow(this.sql, scope);
  }

  /**
   * Clears expired results (`cleared`; the tombstone stays) and deletes rows past their tombstone
   * with their steps (`deleted`), in bounded batches that skip locked rows.
   */
  sweep(options: SweepOptions = {}): Promise<SweepResult> {
    return sweep(this.sql, this.store.statements, this.clock, options);
  }

  /** Validates a spec and computes its fingerprint and retention. */
  prepare(spec: OperationSpec): PreparedSpec {
    validateName('tenant', spec.tenant);
    validateName('operation', spec.operation);
    validateKey(spec.key, this.minKeyLength);
    const fingerprint =
      typeof spec.fingerprint === 'string'
        ? spec.fingerprint
        : computeFingerprint(spec.request ?? null, spec.fingerprint);
    const base = typeof this.retention === 'function' ? this.retention(spec.operation) : this.retention;
    const retention = { ...defaultRetention, ...base, ...spec.retention };
    if (!(retention.resultMs > 0 && retention.tombstoneMs >= retention.resultMs)) {
      throw new InvalidArgumentError('retention needs resultMs > 0 and tombstoneMs >= resultMs');
    }
    return {
      scope: { tenant: spec.tenant, operation: spec.operation, key: spec.key },
      fingerprint,
      retention,
      waitMs: nonNegative('waitMs', spec.waitMs ?? this.waitMs),
      transactionRetries: nonNegative(
        'transactionRetries',
        spec.transactionRetries ?? this.transactionRetries,
      ),
      recording: spec.recording === undefined ? this.recording : recordingOf(spec.recording),
      readFirst: spec.readFirst === undefined ? this.readFirst : readFirstOf(spec.readFirst),
    };
  }

  /**
   * What an existing row answers: its replay, or its refusal (thrown); a pending row is waited
   * for until `deadline`. Null: there is no row (any more), or its tombstone passed: run afresh.
   */
  private async settle<T>(
    db: Queryable,
    prepared: PreparedSpec,
    found: RequestRow | null,
    deadline: number,
  ): Promise<OperationResult<T> | null> {
    const { scope } = prepared;
    for (let row = found; row; row = await this.store.readRow(db, scope)) {
      const now = this.clock.now();
      const decision = decide<T>(scope, row, prepared.fingerprint, now);
      if (decision.kind === 'replay') return decision.result;
      if (decision.kind === 'forgotten') return null;
      // A committed pending row belongs to a multi-step execution: wait for it, boundedly.
      if (now >= deadline) throw inProgress(scope, row, now);
      await this.clock.sleep(Math.min(50, deadline - now));
    }
    return null;
  }

  /** After a failed execution: the key's row if another execution recorded it; null if none or unreadable. */
  private async readAfterFailure(db: Queryable, scope: OperationScope): Promise<RequestRow | null> {
    try {
      return await this.store.readRow(db, scope);
    } catch {
      return null; // the database went away too: the execution's own failure is the answer
    }
  }

  /** Turns a thrown value into what the caller sees. */
  private classify(error: unknown): unknown {
    if (isIdemError(error)) return error;
    return new OperationFailedError(error, isRetryable(error));
  }

  /**
   * Commit-time recording: runs the handler, then inserts the completed record as the last
   * statement of its transaction. When the key already has a row, a past tombstone is taken over
   * in place; another fingerprint, an expired result or a stored failure is thrown (rolling the
   * handler's writes back); anything else throws `KeyTaken`, which rolls them back too.
   */
  private async executeAndRecord<T, TxClient>(
    tx: Transaction<TxClient>,
    prepared: PreparedSpec,
    handler: Handler<T, TxClient>,
    execution: Execution,
  ): Promise<OperationResult<T>> {
    const { scope } = prepared;
    const { statements } = this.store;
    let outcome: Outcome<T>;
    try {
      outcome = toOutcome(await handler(tx, this.contextOf(scope)));
    } catch (error) {
      execution.handlerFailed = true;
      throw error;
    }
    const params = this.store.recordParams(prepared, outcome);
    if (execution.mayCommit && canCommitWith(tx)) {
      // The record goes out with COMMIT: one round trip for both (see `queryAndCommit`).
      try {
        await this.bounded(prepared, () =>
          tx[queryAndCommit](
            statements.recordOrFail,
            [...params, waitInterval(prepared, this.clock.now())],
            statements.names.recordOrFail,
          ),
        );
      } catch (error) {
        // The transaction rolled back; the row, committed by another execution, is read after it.
        if (sqlStateOf(error) === SqlState.uniqueViolation) throw new KeyTaken(null, true);
        throw error;
      }
      return freshResult(outcome);
    }
    const { rows } = await this.bounded(prepared, () =>
      tx.query<{ recorded: number }>(
        statements.record,
        [...params, waitInterval(prepared, this.clock.now())],
        statements.names.record,
      ),
    );
    if (Number(rows[0]?.recorded) !== 1) {
      // The duplicate that got here first has committed (the insert waited for it), so a
      // statement from now on sees its row.
      const row = await this.store.readRow(tx, scope);
      if (!row) throw new KeyTaken(null);
      const decision = decide<T>(scope, row, prepared.fingerprint, this.clock.now());
      if (decision.kind !== 'forgotten') throw new KeyTaken(row);
      const reclaimed = await tx.query(statements.recordOverForgotten, params);
      if (reclaimed.rowCount !== 1) throw new KeyTaken(null);
      await tx.query(statements.forgetSteps, [scope.tenant, scope.operation, scope.key]);
    }
    return freshResult(outcome);
  }

  private contextOf(scope: OperationScope): OperationContext {
    return { scope, deriveKey: (name) => deriveKey(scope, name) };
  }

  /** Runs a statement that waits on the key's index entry; a lock timeout means in progress. */
  private async bounded<R>(prepared: PreparedSpec, statement: () => Promise<R>): Promise<R> {
    try {
      return await statement();
    } catch (error) {
      if (sqlStateOf(error) === SqlState.lockNotAvailable) {
        throw inProgress(prepared.scope, null, this.clock.now(), error);
      }
      throw error;
    }
  }

  private async claimAndRun<T, TxClient>(
    db: Queryable,
    tx: Transaction<TxClient>,
    prepared: PreparedSpec,
    handler: Handler<T, TxClient>,
  ): Promise<OperationResult<T>> {
    const { scope } = prepared;
    const { statements } = this.store;
    const deadline = this.clock.now() + prepared.waitMs;
    let fence = await this.claim(db, prepared, deadline);
    while (fence === null) {
      // Someone else holds or held the key. Their transaction has finished (the claim waited for
      // it), so the row is committed and readable.
      const row = await this.store.readRow(db, scope);
      if (!row) {
        fence = await this.claim(db, prepared, deadline); // swept in between: claim afresh
        continue;
      }
      const now = this.clock.now();
      const decision = decide<T>(scope, row, prepared.fingerprint, now);
      if (decision.kind === 'replay') return decision.result;
      if (decision.kind === 'forgotten') {
        const { rows } = await db.query<{ fence: number }>(
          statements.reclaimForgotten,
          this.store.claimParams(prepared, null),
        );
        if (rows[0]) {
          await db.query(statements.forgetSteps, [scope.tenant, scope.operation, scope.key]);
          fence = Number(rows[0].fence);
        }
        continue;
      }
      // A committed pending row belongs to a multi-step execution: wait for it, boundedly.
      if (now >= deadline) throw inProgress(scope, row, now);
      await this.clock.sleep(Math.min(50, deadline - now));
    }
    const outcome = toOutcome(await handler(tx, this.contextOf(scope)));
    await db.query(
      statements.complete,
      this.store.completeParams(prepared, fence, outcome),
      statements.names.complete,
    );
    return freshResult(outcome);
  }

  /** Returns the fence (1) when this transaction claimed the key, null when it already exists. */
  private async claim(db: Queryable, prepared: PreparedSpec, deadline: number): Promise<number | null> {
    const { statements } = this.store;
    const { rows } = await this.bounded(prepared, () =>
      db.query<{ claimed: number }>(
        statements.claim,
        [...this.store.claimParams(prepared, null), waitInterval(prepared, this.clock.now(), deadline)],
        statements.names.claim,
      ),
    );
    return Number(rows[0]?.claimed) === 1 ? 1 : null;
  }
}

/** The bounded wait on a key's index entry, as a PostgreSQL interval string for `lock_timeout`. */
function waitInterval(prepared: PreparedSpec, now: number, deadline = now + prepared.waitMs): string {
  return `${Math.ceil(Math.max(1, deadline - now))}ms`;
}

function recordingOf(value: Recording): Recording {
  if (value !== 'commit' && value !== 'claim') {
    throw new InvalidArgumentError("recording must be 'commit' or 'claim'");
  }
  return value;
}

function readFirstOf(value: ReadFirst): ReadFirst {
  if (value !== true && value !== false && value !== 'auto') {
    throw new InvalidArgumentError("readFirst must be true, false or 'auto'");
  }
  return value;
}

/**
 * Creates an `Idem` for one database and schema. See `IdemOptions` for every option and its default.
 *
 * @example
 * const idem = createIdem({ sql: fromPg(pool), waitMs: 2000 });
 */
export function createIdem<Client>(options: IdemOptions<Client>): Idem<Client> {
  return new Idem(options);
}

// Exponential from 20 ms, jitter 0.75 (a delay in [d/4, d]: 5–20 ms, 10–40 ms, …): keeps retried
// deadlock victims from colliding again.
const backoff = createBackoff({ baseMs: 20, jitter: 0.75 }, {});
