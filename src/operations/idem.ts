import { systemClock, type Clock } from '../core/clock.js';
import {
  InvalidArgumentError,
  isIdemError,
  isPreparedStatementsUnsupported,
  OperationFailedError,
  type OperationScope,
} from '../core/errors.js';
import { fingerprint as computeFingerprint } from '../core/fingerprint.js';
import { deriveKey, validateKey, validateName } from '../core/keys.js';
import { createBackoff } from '../core/resilience/backoff.js';
import { isRetryable } from '../core/retryable.js';
import type { Queryable, Sql, Transaction } from '../core/sql.js';
import { isTransactionRetryable, SqlState, sqlStateOf } from '../core/sqlstate.js';
import { defaultSchema } from '../migrate/schema-name.js';
import { observe, type OperationObserver } from '../observability/events.js';
import { MultiStepRun, type MultiStepOperation } from './multi-step.js';
import { defaultRetention, type IdemOptions, type OperationSpec, type RetentionPolicy } from './options.js';
import { toOutcome, type OperationResult, type Outcome } from './outcome.js';
import { decide, inProgress } from './resolve-existing.js';
import { decodeRequestRow, type RequestRow } from './request-row.js';
import { renderStatements, type Statements } from './statements.js';
import { sweep, type SweepOptions, type SweepResult } from './sweep.js';
import { defaultHeartbeatMs } from '../steps/engine.js';

/** Passed to a handler beside the transaction. */
export interface OperationContext {
  scope: OperationScope;
  /** A key for downstream calls, derived from this intent and `name`; stable across retries. */
  deriveKey(name: string): string;
}

/** A prepared call: validated scope, fingerprint and retention. */
export interface PreparedSpec {
  scope: OperationScope;
  fingerprint: string;
  retention: RetentionPolicy;
  waitMs: number;
  transactionRetries: number;
}

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
export class Idem<Client = unknown> {
  readonly sql: Sql<Client>;
  readonly schema: string;
  readonly clock: Clock;
  /** @internal */ readonly statements: Statements;
  /** @internal */ readonly leaseMs: number;
  /** @internal */ readonly heartbeatMs: number;
  private readonly waitMs: number;
  private readonly minKeyLength: number;
  private readonly transactionRetries: number;
  private readonly retention: IdemOptions['retention'];
  private readonly observer: OperationObserver | undefined;

  constructor(options: IdemOptions<Client>) {
    this.sql = options.sql;
    this.schema = options.schema ?? defaultSchema;
    this.statements = renderStatements(this.schema);
    this.clock = options.clock ?? systemClock;
    this.waitMs = nonNegative('waitMs', options.waitMs ?? 5000);
    this.leaseMs = positive('leaseMs', options.leaseMs ?? 30_000);
    this.heartbeatMs = positive('heartbeatMs', options.heartbeatMs ?? defaultHeartbeatMs(this.leaseMs));
    if (this.heartbeatMs >= this.leaseMs)
      throw new InvalidArgumentError('heartbeatMs must be less than leaseMs');
    this.minKeyLength = positive('minKeyLength', options.minKeyLength ?? 1);
    this.transactionRetries = nonNegative('transactionRetries', options.transactionRetries ?? 3);
    this.retention = options.retention;
    this.observer = options.onEvent;
  }

  /**
   * Runs `handler` once per intent, in a transaction idem opens. The claim, the handler's writes
   * and the stored result commit together. A retry of a finished key returns the stored result
   * without running the handler. Throws `KeyReusedError`, `InProgressError`, `ExpiredError`,
   * `InvalidKeyError`, or `OperationFailedError` (with `retryable` and the handler's error as
   * `cause`); a handler's throw leaves nothing behind. Serialization failures and deadlocks retry
   * the whole transaction up to `transactionRetries` times.
   */
  async run<T>(
    spec: OperationSpec,
    handler: (tx: Transaction<Client>, context: OperationContext) => Promise<T | Outcome<T>>,
  ): Promise<OperationResult<T>> {
    const prepared = this.prepare(spec);
    return observe('idem.run', prepared.scope, this.observer, () => this.runPrepared(prepared, handler));
  }

  private async runPrepared<T>(
    prepared: PreparedSpec,
    handler: (tx: Transaction<Client>, context: OperationContext) => Promise<T | Outcome<T>>,
  ): Promise<OperationResult<T>> {
    // Fast path: a finished key is answered by one indexed read, with no transaction.
    const replay = await this.tryReplay<T>(this.sql, prepared);
    if (replay) return replay;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.sql.transaction((tx) => this.claimAndRun(tx, tx, prepared, handler));
      } catch (error) {
        // A pooler's prepared-statement refusal rolled everything back, and `fromPg` now sends
        // statements unnamed: the same attempt again succeeds.
        const again = isTransactionRetryable(error) || isPreparedStatementsUnsupported(error);
        if (attempt < prepared.transactionRetries && again) {
          await this.clock.sleep(backoff(attempt + 1));
          continue;
        }
        throw this.classify(error, prepared.scope);
      }
    }
  }

  /**
   * Like `run`, inside a transaction the caller already opened (`fromPgClient(client)`,
   * `fromKysely(trx)`, …). idem's rows commit or roll back with the caller's. If this throws, the
   * caller must roll back. No automatic retry: the caller owns the transaction.
   */
  async runIn<T, TxClient>(
    tx: Transaction<TxClient>,
    spec: OperationSpec,
    handler: (tx: Transaction<TxClient>, context: OperationContext) => Promise<T | Outcome<T>>,
  ): Promise<OperationResult<T>> {
    const prepared = this.prepare(spec);
    return observe('idem.runIn', prepared.scope, this.observer, async () => {
      try {
        return await this.claimAndRun(tx, tx, prepared, handler);
      } catch (error) {
        throw this.classify(error, prepared.scope);
      }
    });
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
   */
  async steps<T>(
    spec: OperationSpec,
    body: (op: MultiStepOperation<Client>) => Promise<T | Outcome<T>>,
  ): Promise<OperationResult<T>> {
    const prepared = this.prepare(spec);
    return observe('idem.steps', prepared.scope, this.observer, () =>
      new MultiStepRun<T, Client>(this, prepared, body).execute(),
    );
  }

  /** Reads a key's row, or null. For tools and tests. */
  async inspect(scope: OperationScope): Promise<RequestRow | null> {
    const { rows } = await this.sql.query(this.statements.read, [scope.tenant, scope.operation, scope.key]);
    return rows[0] ? decodeRequestRow(rows[0]) : null;
  }

  /** Clears expired results and deletes rows past their tombstone, in small batches. */
  sweep(options: SweepOptions = {}): Promise<SweepResult> {
    return sweep(this.sql, this.statements, this.clock, options);
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
    };
  }

  /** @internal Reads the key and returns a replay if it is finished; throws its refusal if any. */
  async tryReplay<T>(db: Queryable, prepared: PreparedSpec): Promise<OperationResult<T> | null> {
    const row = await this.readRow(db, prepared.scope);
    if (!row) return null;
    const decision = decide<T>(prepared.scope, row, prepared.fingerprint, this.clock.now());
    return decision.kind === 'replay' ? decision.result : null;
  }

  /** @internal */
  async readRow(db: Queryable, scope: OperationScope): Promise<RequestRow | null> {
    const { rows } = await db.query(
      this.statements.read,
      [scope.tenant, scope.operation, scope.key],
      this.statements.names.read,
    );
    return rows[0] ? decodeRequestRow(rows[0]) : null;
  }

  /**
   * @internal Parameters shared by every claim statement: $1..$3 scope, $4 fingerprint, $5..$8 times.
   * A single-transaction claim fixes the retention now (it commits together with its result); a
   * multi-step claim keeps the whole tombstone window until `completeLate` sets it from completion.
   */
  claimParams(prepared: PreparedSpec, lockedUntil: number | null): unknown[] {
    const now = this.clock.now();
    const { scope, retention } = prepared;
    const resultMs = lockedUntil === null ? retention.resultMs : retention.tombstoneMs;
    return [
      scope.tenant,
      scope.operation,
      scope.key,
      prepared.fingerprint,
      lockedUntil === null ? null : new Date(lockedUntil),
      new Date(now),
      new Date(now + resultMs),
      new Date(now + retention.tombstoneMs),
    ];
  }

  /** @internal The parameters of `complete` ($1..$10) and `completeLate` ($1..$12). */
  completeParams(prepared: PreparedSpec, fence: number, outcome: Outcome<unknown>, late = false): unknown[] {
    const now = this.clock.now();
    const { scope, retention } = prepared;
    const params = [
      scope.tenant,
      scope.operation,
      scope.key,
      fence,
      outcome.state,
      JSON.stringify(outcome.value ?? null),
      outcome.body ?? null,
      outcome.resource?.type ?? null,
      outcome.resource?.id ?? null,
      new Date(now),
    ];
    if (late) params.push(new Date(now + retention.resultMs), new Date(now + retention.tombstoneMs));
    return params;
  }

  /** @internal Turns a thrown value into what the caller sees. */
  classify(error: unknown, _scope: OperationScope): unknown {
    if (isIdemError(error)) return error;
    return new OperationFailedError(error, isRetryable(error));
  }

  private async claimAndRun<T, TxClient>(
    db: Queryable,
    tx: Transaction<TxClient>,
    prepared: PreparedSpec,
    handler: (tx: Transaction<TxClient>, context: OperationContext) => Promise<T | Outcome<T>>,
  ): Promise<OperationResult<T>> {
    const { scope } = prepared;
    const deadline = this.clock.now() + prepared.waitMs;
    let fence = await this.claim(db, prepared, deadline);
    while (fence === null) {
      // Someone else holds or held the key. Their transaction has finished (the claim waited for
      // it), so the row is committed and readable.
      const row = await this.readRow(db, scope);
      if (!row) {
        fence = await this.claim(db, prepared, deadline); // swept in between: claim afresh
        continue;
      }
      const now = this.clock.now();
      const decision = decide<T>(scope, row, prepared.fingerprint, now);
      if (decision.kind === 'replay') return decision.result;
      if (decision.kind === 'forgotten') {
        const { rows } = await db.query<{ fence: number }>(
          this.statements.reclaimForgotten,
          this.claimParams(prepared, null),
        );
        if (rows[0]) {
          await db.query(this.statements.forgetSteps, [scope.tenant, scope.operation, scope.key]);
          fence = Number(rows[0].fence);
        }
        continue;
      }
      // A committed pending row belongs to a multi-step execution: wait for it, boundedly.
      if (now >= deadline) throw inProgress(scope, row, now);
      await this.clock.sleep(Math.min(50, deadline - now));
    }
    const context: OperationContext = { scope, deriveKey: (name) => deriveKey(scope, name) };
    const outcome = toOutcome(await handler(tx, context));
    await db.query(
      this.statements.complete,
      this.completeParams(prepared, fence, outcome),
      this.statements.names.complete,
    );
    return {
      value: outcome.value,
      state: outcome.state,
      replayed: false,
      resource: outcome.resource ?? null,
      body: outcome.body ?? null,
    };
  }

  /** Returns the fence (1) when this transaction claimed the key, null when it already exists. */
  private async claim(db: Queryable, prepared: PreparedSpec, deadline: number): Promise<number | null> {
    const waitMs = Math.max(1, deadline - this.clock.now());
    try {
      const { rows } = await db.query<{ claimed: number }>(
        this.statements.claim,
        [...this.claimParams(prepared, null), `${Math.ceil(waitMs)}ms`],
        this.statements.names.claim,
      );
      return Number(rows[0]?.claimed) === 1 ? 1 : null;
    } catch (error) {
      if (sqlStateOf(error) === SqlState.lockNotAvailable) {
        throw inProgress(prepared.scope, null, this.clock.now(), error);
      }
      throw error;
    }
  }
}

/** Creates an `Idem` for one database and schema. See `IdemOptions` for every option and its default. */
export function createIdem<Client>(options: IdemOptions<Client>): Idem<Client> {
  return new Idem(options);
}

// Exponential from 20 ms, jitter 0.75 (a delay in [d/4, d]: 5–20 ms, 10–40 ms, …): keeps retried
// deadlock victims from colliding again.
const backoff = createBackoff({ baseMs: 20, jitter: 0.75 }, {});

function positive(name: string, value: number): number {
  if (!(Number.isFinite(value) && value > 0))
    throw new InvalidArgumentError(`${name} must be a positive number`);
  return value;
}

function nonNegative(name: string, value: number): number {
  if (!(Number.isFinite(value) && value >= 0)) throw new InvalidArgumentError(`${name} must be zero or more`);
  return value;
}
