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
import { freshResult, toOutcome, type OperationResult, type Outcome } from './outcome.js';
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
   * and renews the lease, then runs `fn`, then records its JSON result with the step name as the
   * recovery point; all commit together. A recorded step is not run again: its stored result is
   * returned. Keep `fn` to database work: a call to the outside world belongs in `call`, because
   * this transaction (and its pooled connection and row lock) stays open while `fn` runs.
   */
  step<R>(name: string, fn: (tx: Transaction<Client>, step: { key: string }) => Promise<R>): Promise<R>;
  /**
   * A call to the outside world (a card charge, an e-mail): runs `fn` once per intent with no
   * transaction and no pooled connection held. First a short transaction checks the fence, renews
   * the lease and records that the call started (recovery point `call:<name>`); then `fn` runs
   * with the step's derived `key` (also the current key for `idem/client`) while a heartbeat
   * renews the lease every `heartbeatMs`; then a second short transaction checks the fence and
   * records the JSON result. If the process dies during the call, or the lease is lost (`signal`
   * aborts, and this execution gets `FencedError`), the retry that takes over calls again with
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
}

/** One execution of a multi-step operation: claim or take over, run the body, complete. */
export class MultiStepRun<T, Client> implements MultiStepOperation<Client> {
  readonly scope: OperationScope;
  fence = 0;
  resumed = false;
  private recorded = new Map<string, string>();
  /** The first step or call that threw, for the stored failure. */
  private failedAt: string | null = null;
  private readonly runner: StepRunner<Client>;
  private readonly lease: FencedLease;

  constructor(
    private readonly env: MultiStepEnvironment<Client>,
    private readonly prepared: PreparedSpec,
    private readonly body: (op: MultiStepOperation<Client>) => Promise<T | Outcome<T>>,
  ) {
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
    let outcome: Outcome<T>;
    try {
      outcome = toOutcome(await this.body(this));
    } catch (error) {
      throw await this.settleFailure(error);
    }
    const { rowCount } = await this.env.sql.query(
      this.env.store.statements.completeLate,
      this.env.store.completeParams(this.prepared, this.fence, outcome, true),
      this.env.store.statements.names.completeLate,
    );
    if (rowCount !== 1) throw new FencedError(this.scope, this.fence);
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
    if (stored !== undefined) return JSON.parse(stored) as R;
    const key = this.deriveKey(name);
    const { statements, clock } = this.env.store;
    const { value, json } = await this.failingAt(name, () =>
      runLocalStep(this.runner, this.lease, {
        point: name,
        key,
        run: (tx) => fn(tx, { key }),
        record: async (tx, text) => {
          await tx.query(
            statements.recordStep,
            [...this.scopeParams(), name, text, this.fence, new Date(clock.now())],
            statements.names.recordStep,
          );
        },
      }),
    );
    this.recorded.set(name, json);
    return value;
  }

  async call<R>(name: string, fn: (call: CallContext) => Promise<R>): Promise<R> {
    const stored = this.recorded.get(name);
    if (stored !== undefined) return JSON.parse(stored) as R;
    const { statements, clock } = this.env.store;
    const { value, json } = await this.failingAt(name, () =>
      runCallStep(this.runner, this.lease, {
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
        record: async (sql, _value, text) => {
          const { rows } = await sql.query<{ held: number }>(
            statements.recordCall,
            [...this.renewParams(name), text, new Date(clock.now())],
            statements.names.recordCall,
          );
          if (Number(rows[0]?.held) !== 1) throw this.lease.lost();
        },
      }),
    );
    this.recorded.set(name, json);
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
    const { statements, clock } = this.env.store;
    try {
      const freed = await sql.query(statements.releaseKey, [...this.scopeParams(), this.fence]);
      if (freed.rowCount === 1) return isIdemError(error) ? error : new OperationFailedError(error, false);
      const text = describeFailure(error);
      const now = clock.now();
      const { retention } = this.prepared;
      const stored = await sql.query(statements.failLate, [
        ...this.scopeParams(),
        this.fence,
        text,
        this.failedAt,
        new Date(now),
        new Date(now + retention.resultMs),
        new Date(now + retention.tombstoneMs),
      ]);
      if (stored.rowCount !== 1) return new FencedError(this.scope, this.fence);
      return new StepFailedError(this.scope, this.failedAt, text, error, false);
    } catch {
      // The failure could not be written (the database went away): leave the operation pending;
      // its lease lapses and a retry decides again.
      return isIdemError(error) ? error : new OperationFailedError(error, false);
    }
  }

  /** Claims the key, takes it over from a lapsed holder, or returns the stored result. */
  private async acquire(): Promise<OperationResult<T> | null> {
    const { env, prepared, scope } = this;
    const { sql } = env;
    const { statements, clock } = env.store;
    const deadline = clock.now() + prepared.waitMs;
    for (;;) {
      const lease = clock.now() + env.leaseMs;
      // Named (prepared once per connection): every multi-step operation starts with it.
      const claimed = await sql.query<{ fence: number }>(
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
    const { rows } = await this.env.sql.query<{ step: string; result: string }>(
      this.env.store.statements.readSteps,
      this.scopeParams(),
    );
    this.recorded = new Map(rows.map((r) => [r.step, r.result]));
  }

  private async release(): Promise<void> {
    await this.env.sql.query(this.env.store.statements.releaseLease, [
      ...this.scopeParams(),
      this.fence,
      new Date(this.env.store.clock.now()),
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
