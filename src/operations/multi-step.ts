import { FencedError, isFenced, isIdemError, OperationFailedError, StepFailedError } from '../core/errors.js';
import type { OperationScope } from '../core/errors.js';
import { deriveKey } from '../core/keys.js';
import { currentCausation, runAsIntent } from '../core/causation.js';
import type { Clock } from '../core/clock.js';
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
import type { PreparedSpec } from './prepared-spec.js';
import { decide, inProgress } from './resolve-existing.js';
import type { RequestStatements } from './statements.js';

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
  clock: Clock;
  /** The statements of the `requests` and `steps` tables. */
  statements: RequestStatements;
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
    this.runner = { sql: env.sql, clock: env.clock, heartbeatMs: env.heartbeatMs };
    const { fenceAndRenew } = env.statements;
    this.lease = {
      hold: async (tx, point) => {
        if (!(await fenceAndRenew(tx, { ...this.held(), point }))) throw this.lease.lost();
      },
      renew: () => fenceAndRenew(env.sql, { ...this.held(), point: null }),
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
    if (!(await this.takeOverAbandoned())) return null;
    this.resumed = true;
    await this.loadRecordedSteps();
    return this.runBody(body);
  }

  /**
   * Ends an abandoned defined operation as failed, without running it: an operator's decision,
   * or its give-up policy. Null when it is not abandoned any more.
   */
  async failAbandoned(failure: string): Promise<StepFailedError | null> {
    if (!(await this.takeOverAbandoned())) return null;
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
    const { scope, fence, env } = this;
    const kept = await env.intents.adopt(env.sql, { scope, fence, input, now: env.clock.now() });
    this.intent = input;
    if (kept === 0) {
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
    const { scope, fence, env } = this;
    const completion = { scope, fence, outcome, retention: this.prepared.retention, now: env.clock.now() };
    const done = this.intent
      ? await env.intents.complete(env.sql, completion)
      : await env.statements.completeLate(env.sql, completion);
    if (!done) throw new FencedError(scope, fence);
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
    const { statements, clock } = this.env;
    const resultRow = (json: string, meta: string | null) => ({
      scope: this.scope,
      fence: this.fence,
      step: name,
      json,
      meta,
      now: clock.now(),
      derivedKey: key,
      traceparent: currentCausation().traceparent,
    });
    const { value, json, meta } = await this.failingAt(name, () =>
      runLocalStep(this.runner, this.lease, {
        point: name,
        key,
        // On behalf of this intent whatever context the caller runs in (a Fastify route handler
        // runs outside the hook that started the operation): what it writes names the intent.
        run: (tx) => runAsIntent(this.scope, () => fn(tx, { key })),
        record: (tx, text, types) => statements.recordStep(tx, resultRow(text, types)),
        // The fence was checked, and the row locked against a takeover, by the transaction's first
        // statement (`lease.hold`); the record is a plain INSERT, which raises rather than skips on
        // a clash, so COMMIT behind it either keeps the step's writes with it or rolls both back.
        recordWithCommit: (tx, text, types) => statements.recordStep.withCommit(tx, resultRow(text, types)),
      }),
    );
    this.recorded.set(name, { json, meta });
    return value;
  }

  async call<R>(name: string, fn: (call: CallContext) => Promise<R>): Promise<R> {
    const stored = this.recorded.get(name);
    if (stored !== undefined) return decodeResult(stored.json, stored.meta) as R;
    const { statements, clock } = this.env;
    const key = this.deriveKey(name);
    // The call's row keeps the key it sends and the trace it runs in (`idem trace`).
    const trace = { derivedKey: key, traceparent: currentCausation().traceparent };
    const { value, json, meta } = await this.failingAt(name, () =>
      runCallStep(this.runner, this.lease, {
        name,
        key,
        begin: (sql) =>
          statements.startCall(sql, {
            ...this.held(),
            ...trace,
            point: `call:${name}`,
            step: name,
            now: clock.now(),
          }),
        call: (call) => runAsIntent(this.scope, () => fn(call)),
        record: async (sql, _value, text, types) => {
          const call = { ...this.held(), ...trace, step: name, json: text, meta: types, now: clock.now() };
          if (!(await statements.recordCall(sql, call))) throw this.lease.lost();
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
    const { sql, statements } = this.env;
    try {
      if (await statements.releaseKey(sql, { scope: this.scope, fence: this.fence })) {
        return isIdemError(error) ? error : new OperationFailedError(error, false);
      }
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
  private storeFailure(error: string, step: string | null): Promise<boolean> {
    const { scope, fence, env } = this;
    const failure = { scope, fence, error, step, retention: this.prepared.retention, now: env.clock.now() };
    return this.intent ? env.intents.fail(env.sql, failure) : env.statements.failLate(env.sql, failure);
  }

  /** Claims the key, takes it over from a lapsed holder, or returns the stored result. */
  private async acquire(): Promise<OperationResult<T> | null> {
    const { env, prepared, scope } = this;
    const { sql, statements, clock } = env;
    const { fingerprint, retention, cause } = prepared;
    const deadline = clock.now() + prepared.waitMs;
    for (;;) {
      const lease = clock.now() + env.leaseMs;
      const claim = () => ({ scope, fingerprint, retention, cause, lockedUntil: lease, now: clock.now() });
      // Named (prepared once per connection): every multi-step operation starts with it. A
      // defined operation keeps its input in the same statement.
      const claimed = this.intent
        ? await env.intents.claim(sql, { ...claim(), input: this.intent })
        : await statements.claimCommitted(sql, claim());
      if (claimed !== null) {
        this.fence = claimed;
        return null;
      }
      const row = await statements.read(sql, { scope });
      if (!row) continue; // swept or freed in between
      const now = clock.now();
      const decision = decide<T>(scope, row, fingerprint, now);
      if (decision.kind === 'replay') return decision.result;
      if (decision.kind === 'forgotten') {
        const reclaimed = await sql.transaction(async (tx) => {
          const fence = await statements.reclaimForgotten(tx, claim());
          if (fence !== null) await statements.forgetSteps(tx, { scope });
          return fence;
        });
        if (reclaimed !== null) {
          this.fence = reclaimed;
          return null;
        }
        continue;
      }
      if (row.lockedUntil === null || row.lockedUntil <= now) {
        const fence = await statements.takeOver(sql, { scope, fence: row.fence, lockedUntil: lease, now });
        if (fence !== null) {
          this.fence = fence;
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

  /**
   * A completer's takeover of an abandoned defined operation, by its key, whatever its fence.
   * False when it is not abandoned any more.
   */
  private async takeOverAbandoned(): Promise<boolean> {
    const { env, scope } = this;
    const now = env.clock.now();
    const fence = await env.intents.takeOver(env.sql, { scope, lockedUntil: now + env.leaseMs, now });
    if (fence === null) return false;
    this.fence = fence;
    return true;
  }

  private async loadRecordedSteps(): Promise<void> {
    const rows = await this.env.statements.readSteps(this.env.sql, { scope: this.scope });
    this.recorded = new Map(rows.map((r) => [r.step, { json: r.result, meta: r.result_meta }]));
  }

  private async release(): Promise<void> {
    const { scope, fence, env } = this;
    const now = env.clock.now();
    if (this.intent) {
      // A client's retry may resume it at once; a completer, after one more lease.
      await env.intents.release(env.sql, { scope, fence, now, dueAt: now + env.leaseMs });
      return;
    }
    await env.statements.releaseLease(env.sql, { scope, fence, now });
  }

  /** What a holder's write checks and renews: the key, the fence, the lease renewed from now. */
  private held() {
    return { scope: this.scope, fence: this.fence, lockedUntil: this.env.clock.now() + this.env.leaseMs };
  }
}
