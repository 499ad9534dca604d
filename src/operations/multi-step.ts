import { withIdempotencyKey } from '../core/key-context.js';
import { FencedError, type OperationScope } from '../core/errors.js';
import { deriveKey } from '../core/keys.js';
import type { Transaction } from '../core/sql.js';
import type { Idem, PreparedSpec } from './idem.js';
import { toOutcome, type OperationResult, type Outcome } from './outcome.js';
import { decide, inProgress } from './resolve-existing.js';

/** The handle a multi-step body works through. */
export interface MultiStepOperation<Client = unknown> {
  readonly scope: OperationScope;
  /** This holder's fencing value. It rises each time the operation is taken over. */
  readonly fence: number;
  /** True when this execution took over from a holder that crashed or stalled. */
  readonly resumed: boolean;
  /**
   * Runs `fn` once per intent. Its transaction first checks the fence and renews the lease, then
   * runs `fn`, then records its JSON result with the step name as the recovery point; all commit
   * together. A recorded step is not run again: its stored result is returned. `key` is the
   * derived key to send downstream (the same on every retry and takeover). If `fn` calls the
   * outside world and the process dies before the commit, the retry calls again with that same
   * key, and the downstream's own idempotency makes it one effect.
   */
  step<R>(name: string, fn: (tx: Transaction<Client>, step: { key: string }) => Promise<R>): Promise<R>;
  /** The key a step named `name` sends downstream. */
  deriveKey(name: string): string;
  /** Renews the lease during a long step. Throws `FencedError` if the operation was taken over. */
  heartbeat(): Promise<void>;
}

/** One execution of a multi-step operation: claim or take over, run the body, complete. */
export class MultiStepRun<T, Client> implements MultiStepOperation<Client> {
  readonly scope: OperationScope;
  fence = 0;
  resumed = false;
  private recorded = new Map<string, string>();

  constructor(
    private readonly idem: Idem<Client>,
    private readonly prepared: PreparedSpec,
    private readonly body: (op: MultiStepOperation<Client>) => Promise<T | Outcome<T>>,
  ) {
    this.scope = prepared.scope;
  }

  async execute(): Promise<OperationResult<T>> {
    const replay = await this.acquire();
    if (replay) return replay;
    let outcome: Outcome<T>;
    try {
      outcome = toOutcome(await this.body(this));
    } catch (error) {
      // Leave the operation pending for a retry to resume, and let that retry in at once.
      await this.release().catch(() => undefined);
      throw this.idem.classify(error, this.scope);
    }
    const { rowCount } = await this.idem.sql.query(
      this.idem.statements.completeLate,
      this.idem.completeParams(this.prepared, this.fence, outcome, true),
    );
    if (rowCount !== 1) throw new FencedError(this.scope, this.fence);
    return {
      value: outcome.value,
      state: outcome.state,
      replayed: false,
      resource: outcome.resource ?? null,
      body: outcome.body ?? null,
    };
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
    const { statements, clock, sql } = this.idem;
    const key = this.deriveKey(name);
    const [result, json] = await sql.transaction(async (tx) => {
      // Fence first: this also row-locks the operation, so a takeover waits for this step.
      const fenced = await tx.query(statements.fenceAndRenew, [
        ...this.scopeParams(),
        this.fence,
        new Date(clock.now() + this.idem.leaseMs),
        name,
      ]);
      if (fenced.rowCount !== 1) throw new FencedError(this.scope, this.fence);
      // Outgoing calls made by the step (`idem/client`) carry its derived key without being told.
      const value = await withIdempotencyKey(key, () => fn(tx, { key }));
      const text = JSON.stringify(value ?? null);
      await tx.query(statements.recordStep, [
        ...this.scopeParams(),
        name,
        text,
        this.fence,
        new Date(clock.now()),
      ]);
      return [value, text] as const;
    });
    this.recorded.set(name, json);
    return result;
  }

  async heartbeat(): Promise<void> {
    const { rowCount } = await this.idem.sql.query(this.idem.statements.fenceAndRenew, [
      ...this.scopeParams(),
      this.fence,
      new Date(this.idem.clock.now() + this.idem.leaseMs),
      null,
    ]);
    if (rowCount !== 1) throw new FencedError(this.scope, this.fence);
  }

  /** Claims the key, takes it over from a lapsed holder, or returns the stored result. */
  private async acquire(): Promise<OperationResult<T> | null> {
    const { idem, prepared, scope } = this;
    const { statements, clock, sql } = idem;
    const deadline = clock.now() + prepared.waitMs;
    for (;;) {
      const lease = clock.now() + idem.leaseMs;
      const claimed = await sql.query<{ fence: number }>(
        statements.claimCommitted,
        idem.claimParams(prepared, lease),
      );
      if (claimed.rows[0]) {
        this.fence = Number(claimed.rows[0].fence);
        return null;
      }
      const row = await idem.readRow(sql, scope);
      if (!row) continue; // swept in between
      const now = clock.now();
      const decision = decide<T>(scope, row, prepared.fingerprint, now);
      if (decision.kind === 'replay') return decision.result;
      if (decision.kind === 'forgotten') {
        const reclaimed = await sql.transaction(async (tx) => {
          const { rows } = await tx.query<{ fence: number }>(
            statements.reclaimForgotten,
            idem.claimParams(prepared, lease),
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
    const { rows } = await this.idem.sql.query<{ step: string; result: string }>(
      this.idem.statements.readSteps,
      this.scopeParams(),
    );
    this.recorded = new Map(rows.map((r) => [r.step, r.result]));
  }

  private async release(): Promise<void> {
    await this.idem.sql.query(this.idem.statements.releaseLease, [
      ...this.scopeParams(),
      this.fence,
      new Date(this.idem.clock.now()),
    ]);
  }

  private scopeParams(): [string, string, string] {
    return [this.scope.tenant, this.scope.operation, this.scope.key];
  }
}
