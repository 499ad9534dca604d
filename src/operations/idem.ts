import { systemClock, type Clock } from '../core/clock.js';
import {
  InvalidArgumentError,
  isIdemError,
  OperationFailedError,
  type OperationScope,
  type StepFailedError,
} from '../core/errors.js';
import { validateName } from '../core/keys.js';
import { isRetryable } from '../core/retryable.js';
import { promised } from '../core/promised.js';
import type { Sql, Transaction } from '../core/sql.js';
import { defaultSchema } from '../core/schema-name.js';
import { nonNegative, positive } from '../core/validate.js';
import { observe } from '../observability/events.js';
import { runAsIntent } from '../core/causation.js';
import { createEvents, type IdemEvents } from '../core/event-channel.js';
import { ClaimFirstRecording } from './claim-first.js';
import { CommitTimeRecording } from './commit-recording.js';
import {
  makeDefinition,
  type OperationDefinition,
  type DefineOptions,
  type DefinedBody,
  type DefinedSpec,
  type DefinitionHost,
} from './definitions.js';
import { renderIntentStatements, type IntentStatements } from './intent-statements.js';
import type { Handler, KeyedEngine, RecordingStrategy } from './keyed-run.js';
import { MultiStepRun, type MultiStepEnvironment, type MultiStepOperation } from './multi-step.js';
import { decodeResult, encodeResult } from '../steps/result-codec.js';
import type { IdemOptions, OperationSpec, Recording } from './options.js';
import type { OperationResult, Outcome } from './outcome.js';
import {
  prepareSpec,
  readFirstOf,
  recordingOf,
  type PreparedSpec,
  type SpecDefaults,
} from './prepared-spec.js';
import { ReplayReadPolicy } from './replay-read.js';
import type { RequestRow } from './request-row.js';
import { renderRequestStatements, type RequestStatements } from './statements.js';
import { sweep, type SweepOptions, type SweepResult } from './sweep.js';
import { leaseTimings } from '../steps/lease.js';

export type { OperationContext } from './keyed-run.js';
export type { PreparedSpec } from './prepared-spec.js';

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
  /** The lease of a multi-step operation's holder (`IdemOptions.leaseMs`). */
  readonly leaseMs: number;
  private readonly heartbeatMs: number;
  /** What a call's spec leaves out (`IdemOptions`). */
  private readonly defaults: SpecDefaults;
  /** The statements of the `requests` and `steps` tables. */
  private readonly statements: RequestStatements;
  /** The two ways `run`/`runIn` record a key (`IdemOptions.recording`). */
  private readonly recordings: Record<Recording, RecordingStrategy<Client>>;
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
    this.statements = renderRequestStatements(this.schema);
    const waitMs = nonNegative('waitMs', options.waitMs ?? 5000);
    ({ leaseMs: this.leaseMs, heartbeatMs: this.heartbeatMs } = leaseTimings(options, 30_000));
    this.defaults = {
      waitMs,
      minKeyLength: positive('minKeyLength', options.minKeyLength ?? 1),
      transactionRetries: nonNegative('transactionRetries', options.transactionRetries ?? 3),
      retention: options.retention,
      recording: recordingOf(options.recording ?? 'commit'),
      readFirst: readFirstOf(options.readFirst ?? 'auto'),
    };
    this.events = options.events ?? createEvents();
    this.intentStatements = renderIntentStatements(this.schema);
    const engine: KeyedEngine<Client> = {
      sql: this.sql,
      clock: this.clock,
      statements: this.statements,
      replayRead: new ReplayReadPolicy(),
    };
    this.recordings = { commit: new CommitTimeRecording(engine), claim: new ClaimFirstRecording(engine) };
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
  run<T>(spec: OperationSpec, handler: Handler<T, Client>): Promise<OperationResult<T>> {
    // Not an async function, to spare a replay a layer of promises (see `observe`); an invalid
    // spec still rejects the returned promise rather than throwing.
    return promised(() => {
      const prepared = this.prepare(spec);
      return observe('idem.run', prepared.scope, this.events, () =>
        this.classifying(() =>
          runAsIntent(prepared.scope, () => this.recordings[prepared.recording].run(prepared, handler)),
        ),
      );
    });
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
        runAsIntent(prepared.scope, () => this.recordings[prepared.recording].runIn(tx, prepared, handler)),
      ),
    );
  }

  /** Runs `work`, turning whatever it throws into what the caller sees (an `IdemError`). */
  private classifying<R>(work: () => Promise<R>): Promise<R> {
    const classify = (error: unknown): never => {
      throw isIdemError(error) ? error : new OperationFailedError(error, isRetryable(error));
    };
    return promised(work).then(undefined, classify);
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
      this.classifying(() =>
        runAsIntent(prepared.scope, () =>
          new MultiStepRun<T, Client>(this.stepsEnvironment(), prepared, body).execute(),
        ),
      ),
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
        runAsIntent(prepared.scope, () =>
          new MultiStepRun<T, Client>(this.stepsEnvironment(), prepared, body, { intent: input }).execute(),
        ),
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
      return this.classifying(() =>
        runAsIntent(scope, () => run.failAbandoned(failure ?? 'ended failed by an operator')),
      );
    }
    // Not observed as a client's call: the completer reports its own events.
    return this.classifying(() => runAsIntent(scope, () => run.resumeAbandoned()));
  }

  private stepsEnvironment(): MultiStepEnvironment<Client> {
    return {
      sql: this.sql,
      clock: this.clock,
      statements: this.statements,
      leaseMs: this.leaseMs,
      heartbeatMs: this.heartbeatMs,
      intents: this.intentStatements,
    };
  }

  /** Reads a key's row, or null. For tools and tests. */
  get(scope: OperationScope): Promise<RequestRow | null> {
    return this.statements.read(this.sql, { scope });
  }

  /**
   * Clears expired results (`cleared`; the tombstone stays) and deletes rows past their tombstone
   * with their steps (`deleted`), in bounded batches that skip locked rows.
   */
  sweep(options: SweepOptions = {}): Promise<SweepResult> {
    return sweep(this.sql, this.statements, this.clock, options);
  }

  /** Validates a spec and computes its fingerprint and retention. */
  prepare(spec: OperationSpec): PreparedSpec {
    return prepareSpec(spec, this.defaults);
  }
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
