import { FencedError, isFenced, isIdemError, OperationFailedError, StepFailedError } from '../core/errors.js';
import type { OperationScope } from '../core/errors.js';
import { deriveKey } from '../core/keys.js';
import type { Sql, Transaction } from '../core/sql.js';
import { isRetryableStepFailure } from '../steps/retryable.js';
import {
  describeFailure,
  runCallStep,
  runLocalStep,
  type CallContext,
  type StepRunner,
} from '../steps/engine.js';
import type { FencedLease } from '../steps/lease.js';
import { decodeResult, type EncodedResult } from '../steps/result-codec.js';
import { freshResult, toOutcome, type OperationResult, type Outcome } from './outcome.js';
import type { IntentStatements } from './intent-statements.js';
import type { PreparedSpec, RequestStore } from './request-store.js';
import { decide, inProgress } from './resolve-existing.js';

export type { CallContext } from '../steps/engine.js';

/** The handle a multi-step body works through. */
export interface MultiStepOperation<Client = unknown> {
  readonly scope: OperationScope;
  /** This holder's fencing value. It rises each time the operation is taken over. */
  readonly fence: number;
  /** True when this execution took over from a holder that crashed or stalled. */
  readonly resumed: boolean;
  /**
   * A local step: runs `fn` once per intent in one short transaction that first checks the fence
   * and renews the lease, then runs `fn`, then records its result with the step name as the
   * recovery point; all commit together. A recorded step is not run again: its stored result is
   * returned, with the types `fn` returned (`Date`, `bigint`, bytes, `Map`, `Set`, `undefined`, …);
   * a result that would not come back as itself (a function, a class instance, an `Error`) throws
   * `InvalidArgumentError` naming the step, and the transaction rolls back. Keep `fn` to database
   * work: a call to the outside world belongs in `call`, because this transaction (and its pooled
   * connection and row lock) stays open while `fn` runs.
   */
  step<R>(name: string, fn: (tx: Transaction<Client>, step: { key: string }) => Promise<R>): Promise<R>;
  /**
   * A call to the outside world (a card charge, an e-mail): runs `fn` once per intent with no
   * transaction and no pooled connection held. First a short transaction checks the fence, renews
   * the lease and records that the call started (recovery point `call:<name>`); then `fn` runs
   * with the step's derived `key` (also the current key for `idem/client`) while a heartbeat
   * renews the lease every `heartbeatMs`; then a second short transaction checks the fence and
   * records the result (its types kept, as for `step`). If the process dies during the call, or
   * the lease is lost (`signal` aborts, and this execution gets `FencedError`), the retry that
   * takes over calls again with
   * the same key: the downstream's own idempotency makes it one effect. A recorded call is not
   * run again. Local writes that depend on the answer go in the next `step`.
   */
  call<R>(name: string, fn: (call: CallContext) => Promise<R>): Promise<R>;
  /** The key a step or call named `name` sends downstream. */
  deriveKey(name: string): string;
  /**
   * Renews the lease by hand. Calls renew it on their own (`heartbeatMs`); this is for a body
   * that spends long between steps. Throws `FencedError` if the operation was taken over.
   */
  heartbeat(): Promise<void>;
}

/** What a multi-step execution needs from the `Idem` that started it. */
export interface MultiStepEnvironment<Client> {
  sql: Sql<Client>;
  store: RequestStore;
  /** See `IdemOptions.leaseMs`. */
  leaseMs: number;
  /** See `IdemOptions.heartbeatMs`. */
  heartbeatMs: number;
  /** The statements of defined operations' intents (`idem.define`). */
  intents: IntentStatements;
}

/** A defined operation's input as stored in `intents`, kept while the operation is pending. */
export interface KeptInput {
  json: string;
  meta: string | null;
}

/** One execution of a multi-step operation: claim or take over, run the body, complete. */
export class MultiStepRun<T, Client> implements MultiStepOperation<Client> {
  readonly scope: OperationScope;
  fence = 0;
  resumed = false;
  /** Recorded steps by name, as stored: decoded on each use, so every use gets its own copy. */
  private recorded = new Map<string, EncodedResult>();
  /** The first step or call that threw, for the stored failure. */
  private failedAt: string | null = null;
  private readonly runner: StepRunner<Client>;
  private readonly lease: FencedLease;

  /**
   * Set for a defined operation (`idem.define`): its input is kept in `intents` from the claim
   * (or from `adopt`) until the operation ends, so a completer can finish it.
   */
  private intent: KeptInput | undefined;

  constructor(
    private readonly env: MultiStepEnvironment<Client>,
    private readonly prepared: PreparedSpec,
    private readonly body: (op: MultiStepOperation<Client>) => Promise<T | Outcome<T>>,
    options: { intent?: KeptInput } = {},
  ) {
    this.intent = options.intent;
    this.scope = prepared.scope;
    this.runner = { sql: env.sql, clock: env.store.clock, heartbeatMs: env.heartbeatMs };
    this.lease = {
      hold: async (tx, point) => {
        const { rowCount } = await tx.query(
          env.store.statements.fenceAndRenew,
          this.renewParams(point),
          env.store.statements.names.fenceAndRenew,
        );
        if (rowCount !== 1) throw this.lease.lost();
      },
      renew: async () =>
        (
          await env.sql.query(
            env.store.statements.fenceAndRenew,
            this.renewParams(null),
            env.store.statements.names.fenceAndRenew,
          )
        ).rowCount === 1,
      lost: () => new FencedError(this.scope, this.fence),
    };
  }

  async execute(): Promise<OperationResult<T>> {
    const replay = await this.acquire();
    if (replay) return replay;
    return this.runBody(this.body);
  }

  /**
   * A completer's resume of an abandoned defined operation, by its key: takes it over whatever
   * its fence (a holder that was only slow is fenced from its next write), then runs `body`
   * (the definition's, or its compensation) after the recorded steps, as a client's retry would.
   * Null when it is not abandoned any more (it finished, or its holder renewed the lease).
   */
  async resumeAbandoned(
    body: (op: MultiStepOperation<Client>) => Promise<T | Outcome<T>> = this.body,
  ): Promise<OperationResult<T> | null> {
    const now = this.env.store.clock.now();
    const { rows } = await this.env.sql.query<{ fence: number }>(this.env.intents.takeOver, [
      ...this.scopeParams(),
      new Date(now + this.env.leaseMs),
      new Date(now),
    ]);
    if (!rows[0]) return null;
    this.fence = Number(rows[0].fence);
    this.resumed = true;
    await this.loadRecordedSteps();
    return this.runBody(body);
  }

  /**
   * Ends an abandoned defined operation as failed, without running it: an operator's decision,
   * or its give-up policy. Null when it is not abandoned any more.
   */
  async failAbandoned(failure: string): Promise<StepFailedError | null> {
    const now = this.env.store.clock.now();
    const { rows } = await this.env.sql.query<{ fence: number }>(this.env.intents.takeOver, [
      ...this.scopeParams(),
      new Date(now + this.env.leaseMs),
      new Date(now),
    ]);
    if (!rows[0]) return null;
    this.fence = Number(rows[0].fence);
    const stored = await this.storeFailure(failure, null);
    return stored ? new StepFailedError(this.scope, null, failure, undefined, false) : null;
  }

  /**
   * Keeps `input` as this operation's intent (HTTP steps mode: the key was claimed before the
   * handler named its definition), so a completer can finish it. Throws `FencedError` when the
   * operation was taken over.
   */
  async adopt(input: KeptInput): Promise<void> {
    if (this.intent) return;
    const { rowCount } = await this.env.sql.query(this.env.intents.adopt, [
      ...this.scopeParams(),
      this.fence,
      input.json,
      input.meta,
      new Date(this.env.store.clock.now()),
    ]);
    this.intent = input;
    if (rowCount === 0) {
      // Kept by an earlier execution of the key, or fenced: the fence decides.
      if (!(await this.lease.renew())) throw this.lease.lost();
    }
  }

  private async runBody(
    body: (op: MultiStepOperation<Client>) => Promise<T | Outcome<T>>,
  ): Promise<OperationResult<T>> {
    let outcome: Outcome<T>;
    try {
      outcome = toOutcome(await body(this));
    } catch (error) {
      throw await this.settleFailure(error);
    }
    const params = this.env.store.completeParams(this.prepared, this.fence, outcome, true);
    const { statements } = this.env.store;
    const done = this.intent
      ? Number((await this.env.sql.query<{ done: number }>(this.env.intents.complete, params)).rows[0]?.done)
      : (await this.env.sql.query(statements.completeLate, params, statements.names.completeLate)).rowCount;
    if (done !== 1) throw new FencedError(this.scope, this.fence);
    return freshResult(outcome);
  }

  deriveKey(name: string): string {
    return deriveKey(this.scope, name);
  }

  async step<R>(
    name: string,
    fn: (tx: Transaction<Client>, step: { key: string }) => Promise<R>,
  ): Promise<R> {
    const stored = this.recorded.get(name);
    if (stored !== undefined) return decodeResult(stored.json, stored.meta) as R;
    const key = this.deriveKey(name);
    const { statements, clock } = this.env.store;
    const { value, json, meta } = await this.failingAt(name, () =>
      runLocalStep(this.runner, this.lease, {
        point: name,
        key,
        run: (tx) => fn(tx, { key }),
        record: async (tx, text, types) => {
          await tx.query(
            statements.recordStep,
            [...this.scopeParams(), name, text, this.fence, new Date(clock.now()), types],
            statements.names.recordStep,
          );
        },
      }),
    );
    this.recorded.set(name, { json, meta });
    return value;
  }

  async call<R>(name: string, fn: (call: CallContext) => Promise<R>): Promise<R> {
    const stored = this.recorded.get(name);
    if (stored !== undefined) return decodeResult(stored.json, stored.meta) as R;
    const { statements, clock } = this.env.store;
    const { value, json, meta } = await this.failingAt(name, () =>
      runCallStep(this.runner, this.lease, {
        name,
        key: this.deriveKey(name),
        begin: async (sql) => {
          const { rows } = await sql.query<{ held: number }>(
            statements.startCall,
            [...this.renewParams(`call:${name}`), name, new Date(clock.now())],
            statements.names.startCall,
          );
          return Number(rows[0]?.held) === 1;
        },
        call: fn,
        record: async (sql, _value, text, types) => {
          const { rows } = await sql.query<{ held: number }>(
            statements.recordCall,
            [...this.renewParams(name), text, new Date(clock.now()), types],
            statements.names.recordCall,
          );
          if (Number(rows[0]?.held) !== 1) throw this.lease.lost();
        },
      }),
    );
    this.recorded.set(name, { json, meta });
    return value;
  }

  async heartbeat(): Promise<void> {
    if (!(await this.lease.renew())) throw this.lease.lost();
  }

  private async failingAt<R>(name: string, run: () => Promise<R>): Promise<R> {
    try {
      return await run();
    } catch (error) {
      this.failedAt ??= name;
      throw error;
    }
  }

  /**
   * What the body's failure leaves behind, and what the caller gets:
   * - lost lease: nothing (the new holder owns the row); `FencedError`;
   * - retryable: the lease is released so a retry resumes at once; `OperationFailedError`;
   * - non-retryable, nothing committed yet: the key is freed, a retry runs afresh;
   *   `OperationFailedError`;
   * - non-retryable after a recorded step or a started call: stored as failed, replayed to every
   *   retry; `StepFailedError`.
   */
  private async settleFailure(error: unknown): Promise<unknown> {
    if (isFenced(error)) return error;
    if (isRetryableStepFailure(error)) {
      await this.release().catch(() => undefined);
      return isIdemError(error) ? error : new OperationFailedError(error, true);
    }
    const { sql } = this.env;
    const { statements } = this.env.store;
    try {
      const freed = await sql.query(statements.releaseKey, [...this.scopeParams(), this.fence]);
      if (freed.rowCount === 1) return isIdemError(error) ? error : new OperationFailedError(error, false);
      const text = describeFailure(error);
      if (!(await this.storeFailure(text, this.failedAt))) return new FencedError(this.scope, this.fence);
      return new StepFailedError(this.scope, this.failedAt, text, error, false);
    } catch {
      // The failure could not be written (the database went away): the operation stays pending,
      // its lease lapses, and a retry (or a completer) decides again, so the caller is told to
      // retry: nothing is settled yet.
      return isIdemError(error) ? error : new OperationFailedError(error, true);
    }
  }

  /** Ends the operation `failed` with `text` (and forgets its intent); false when fenced. */
  private async storeFailure(text: string, step: string | null): Promise<boolean> {
    const { sql } = this.env;
    const now = this.env.store.clock.now();
    const { retention } = this.prepared;
    const params = [
      ...this.scopeParams(),
      this.fence,
      text,
      step,
      new Date(now),
      new Date(now + retention.resultMs),
      new Date(now + retention.tombstoneMs),
    ];
    if (this.intent) {
      const { rows } = await sql.query<{ done: number }>(this.env.intents.fail, params);
      return Number(rows[0]?.done) === 1;
    }
    return (await sql.query(this.env.store.statements.failLate, params)).rowCount === 1;
  }

  /** Claims the key, takes it over from a lapsed holder, or returns the stored result. */
  private async acquire(): Promise<OperationResult<T> | null> {
    const { env, prepared, scope } = this;
    const { sql } = env;
    const { statements, clock } = env.store;
    const deadline = clock.now() + prepared.waitMs;
    for (;;) {
      const lease = clock.now() + env.leaseMs;
      // Named (prepared once per connection): every multi-step operation starts with it. A
      // defined operation keeps its input in the same statement.
      const claimed = this.intent
        ? await sql.query<{ fence: number }>(
            env.intents.claim,
            [...env.store.claimParams(prepared, lease), this.intent.json, this.intent.meta],
            env.intents.names.claim,
          )
        : await sql.query<{ fence: number }>(
            statements.claimCommitted,
            env.store.claimParams(prepared, lease),
            statements.names.claimCommitted,
          );
      if (claimed.rows[0]) {
        this.fence = Number(claimed.rows[0].fence);
        return null;
      }
      const row = await env.store.readRow(sql, scope);
      if (!row) continue; // swept or freed in between
      const now = clock.now();
      const decision = decide<T>(scope, row, prepared.fingerprint, now);
      if (decision.kind === 'replay') return decision.result;
      if (decision.kind === 'forgotten') {
        const reclaimed = await sql.transaction(async (tx) => {
          const { rows } = await tx.query<{ fence: number }>(
            statements.reclaimForgotten,
            env.store.claimParams(prepared, lease),
          );
          if (rows[0]) await tx.query(statements.forgetSteps, this.scopeParams());
          return rows[0] ? Number(rows[0].fence) : null;
        });
        if (reclaimed !== null) {
          this.fence = reclaimed;
          return null;
        }
        continue;
      }
      if (row.lockedUntil === null || row.lockedUntil <= now) {
        const { rows } = await sql.query<{ fence: number }>(statements.takeOver, [
          ...this.scopeParams(),
          row.fence,
          new Date(lease),
          new Date(now),
        ]);
        if (rows[0]) {
          this.fence = Number(rows[0].fence);
          this.resumed = true;
          await this.loadRecordedSteps();
          return null;
        }
        continue; // another retry took it over first
      }
      if (now >= deadline) throw inProgress(scope, row, now);
      await clock.sleep(Math.min(50, deadline - now, row.lockedUntil - now));
    }
  }

  private async loadRecordedSteps(): Promise<void> {
    const { rows } = await this.env.sql.query<{ step: string; result: string; result_meta: string | null }>(
      this.env.store.statements.readSteps,
      this.scopeParams(),
    );
    this.recorded = new Map(rows.map((r) => [r.step, { json: r.result, meta: r.result_meta }]));
  }

  private async release(): Promise<void> {
    const now = this.env.store.clock.now();
    if (this.intent) {
      // A client's retry may resume it at once; a completer, after one more lease.
      await this.env.sql.query(this.env.intents.release, [
        ...this.scopeParams(),
        this.fence,
        new Date(now),
        new Date(now + this.env.leaseMs),
      ]);
      return;
    }
    await this.env.sql.query(this.env.store.statements.releaseLease, [
      ...this.scopeParams(),
      this.fence,
      new Date(now),
    ]);
  }

  /** $1..$6 of `fenceAndRenew`: scope, fence, the renewed lease end, the recovery point (or keep it). */
  private renewParams(point: string | null): unknown[] {
    return [
      ...this.scopeParams(),
      this.fence,
      new Date(this.env.store.clock.now() + this.env.leaseMs),
      point,
    ];
  }

  private scopeParams(): [string, string, string] {
    return [this.scope.tenant, this.scope.operation, this.scope.key];
  }
}
