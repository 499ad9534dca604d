import type { QueryResult } from '../core/sql.js';
import { allRows, defineStatement, nothing } from '../core/statement.js';
import type { RetentionPolicy } from './options.js';
import type { Outcome } from './outcome.js';
import {
  causeParams,
  claimParams,
  fencedParams,
  fenceOf,
  keyParams,
  outcomeParams,
  pk,
  prepared,
  touchedRow,
  type ClaimInput,
  type FencedInput,
} from './statement-parts.js';

/** An end of a multi-step operation, with retention counted from now. */
interface EndInput extends FencedInput {
  retention: RetentionPolicy;
  now: number;
}

/** An end's last three parameters: completed_at (now), expires_at and tombstone_until. */
function retainedFromNow({ now, retention }: EndInput): Date[] {
  return [new Date(now), new Date(now + retention.resultMs), new Date(now + retention.tombstoneMs)];
}

/** The end of a multi-step operation: its outcome. */
export interface CompletionInput extends EndInput {
  outcome: Outcome<unknown>;
}

/** $1..$12 of `completeLate` (and of the intents' `complete`). */
export function completionParams(done: CompletionInput): unknown[] {
  return [...fencedParams(done), ...outcomeParams(done.outcome), ...retainedFromNow(done)];
}

/** The failed end of a multi-step operation: the error's text, the step it failed at. */
export interface FailureInput extends EndInput {
  error: string;
  step: string | null;
}

/** $1..$9 of `failLate` (and of the intents' `fail`). */
export function failureParams(failed: FailureInput): unknown[] {
  return [...fencedParams(failed), failed.error, failed.step, ...retainedFromNow(failed)];
}

/** A holder's write that renews its lease to `lockedUntil`. */
export interface RenewInput extends FencedInput {
  lockedUntil: number;
}

/** A recorded step, as stored: its plain-JSON result and that result's type annotations. */
export interface RecordedStep {
  step: string;
  result: string;
  result_meta: string | null;
}

/** The result shape of the call statements: whether the fence held (`held` 1). */
function held(result: QueryResult<{ held: number }>): boolean {
  return Number(result.rows[0]?.held) === 1;
}

/**
 * The statements of multi-step operations (`idem.steps`, HTTP steps mode, defined operations):
 * the claim that commits at once, the lease and its fence, the recorded steps and calls, and the
 * operation's end. Part of `renderRequestStatements` (statements.ts).
 */
/** What a step's row keeps for `idem trace`: the key it sent downstream, and its trace context. */
export interface StepTrace {
  derivedKey: string;
  traceparent: string | null;
}

/** $N, $N+1 of a step's INSERT: its derived key and trace context. */
const traceParams = (step: StepTrace) => [step.derivedKey, step.traceparent];

/** A step's result, recorded at `now`: its plain JSON and that JSON's type annotations. */
export interface StepResult extends StepTrace {
  step: string;
  json: string;
  meta: string | null;
  now: number;
}

/** The last four parameters of a recorded result: its time, its type annotations, `traceParams`. */
const recordedParams = (result: StepResult) => [new Date(result.now), result.meta, ...traceParams(result)];

export function renderStepStatements(s: string) {
  /**
   * A call's statement: checks the fence ($4), renews the lease ($5) and moves the recovery point
   * ($6), and only then runs `write` (the CTE `name`, on `held`); `held` is 1 when the fence held.
   */
  const whileHeld = (name: string, write: string) => `WITH held AS (
        UPDATE ${s}.requests SET locked_until = $5, recovery_point = $6
        WHERE ${pk} AND state = 'pending' AND fence = $4
        RETURNING 1
      ), ${name} AS (
        ${write}
      )
      SELECT count(*)::int AS held FROM held`;
  return {
    /**
     * Claims a key outside any transaction: used by multi-step operations (commits at once).
     * Named (prepared once per connection): every multi-step operation starts with it.
     */
    claimCommitted: prepared('', 'claimCommitted', {
      text: `INSERT INTO ${s}.requests
        (tenant_id, operation, idempotency_key, fingerprint, state, fence, locked_until,
         created_at, expires_at, tombstone_until, caused_by, traceparent)
      VALUES ($1, $2, $3, $4, 'pending', 1, $5, $6, $7, $8, $9, $10)
      ON CONFLICT DO NOTHING
      RETURNING fence`,
      params: (claim: ClaimInput & { lockedUntil: number }) => [...claimParams(claim), ...causeParams(claim)],
      result: fenceOf,
    }),

    /** Takes over a pending operation whose holder's lease ran out. Raises the fence. */
    takeOver: defineStatement({
      text: `UPDATE ${s}.requests SET fence = fence + 1, locked_until = $5
      WHERE ${pk} AND state = 'pending' AND fence = $4 AND (locked_until IS NULL OR locked_until <= $6)
      RETURNING fence`,
      params: (take: RenewInput & { now: number }) => [
        ...fencedParams(take),
        new Date(take.lockedUntil),
        new Date(take.now),
      ],
      result: fenceOf,
    }),

    /**
     * Renews the lease and moves the recovery point (null: keeps it); false (no row back) means
     * the fence was raised.
     */
    fenceAndRenew: prepared('', 'fenceAndRenew', {
      text: `UPDATE ${s}.requests SET locked_until = $5, recovery_point = coalesce($6, recovery_point)
      WHERE ${pk} AND state = 'pending' AND fence = $4
      RETURNING fence`,
      params: (renew: RenewInput & { point: string | null }) => [
        ...fencedParams(renew),
        new Date(renew.lockedUntil),
        renew.point,
      ],
      result: touchedRow,
    }),

    /** Lets a retry take over at once after a retryable failure (the lease ends `now`). */
    releaseLease: defineStatement({
      text: `UPDATE ${s}.requests SET locked_until = $5
      WHERE ${pk} AND state = 'pending' AND fence = $4`,
      params: (release: FencedInput & { now: number }) => [...fencedParams(release), new Date(release.now)],
      result: nothing,
    }),

    /**
     * Stores the outcome of a multi-step operation, which may finish long after its claim, so its
     * retention is counted from completion. The fence check makes a zombie's completion a no-op
     * (false).
     */
    completeLate: prepared('', 'completeLate', {
      text: `UPDATE ${s}.requests SET
        state = $5, result = $6, body = $7, resource_type = $8, resource_id = $9,
        completed_at = $10, expires_at = $11, tombstone_until = $12, locked_until = NULL
      WHERE ${pk} AND state = 'pending' AND fence = $4`,
      params: completionParams,
      result: touchedRow,
    }),

    /**
     * The recorded steps; a call that started and has no result yet is not one. `result_meta`:
     * the result's type annotations (migration 0009), NULL for plain JSON and older rows.
     */
    readSteps: defineStatement({
      text: `SELECT step, result, result_meta FROM ${s}.steps WHERE ${pk} AND result IS NOT NULL`,
      params: keyParams,
      result: allRows<RecordedStep>,
    }),

    /**
     * Records a local step's result ($5 its plain JSON, $8 its type annotations), in the step's
     * transaction; $9–$10 its derived key and trace context (`StepTrace`). `started_at` is the
     * transaction's start (PostgreSQL's `now()`, the time the rows the step wrote carry too), so a
     * trace puts the step before the events and tasks it added (`idem trace`).
     */
    recordStep: prepared('', 'recordStep', {
      text: `INSERT INTO ${s}.steps
        (tenant_id, operation, idempotency_key, step, result, fence, completed_at, result_meta, derived_key, traceparent,
         started_at)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now())`,
      params: (step: FencedInput & StepResult) => [
        ...keyParams(step),
        step.step,
        step.json,
        step.fence,
        ...recordedParams(step),
      ],
      result: nothing,
    }),

    /**
     * Before a call, in one statement on its own: checks the fence, renews the lease, moves the
     * recovery point to `call:<name>` ($6) and marks the call as started ($7 the step, $8 the
     * time), committed before the call runs: from here on an external effect may exist. A retry
     * that repeats the call finds the row and keeps the first start time. False (`held` 0): fenced.
     * One statement instead of a transaction of two: 1 round trip instead of 4, while a burst of
     * calls starts at once (40 calls on a pool of 8: see test/operations/calls-hold-nothing.test.ts).
     */
    startCall: prepared('', 'startCall', {
      text: whileHeld(
        'started',
        `INSERT INTO ${s}.steps (tenant_id, operation, idempotency_key, step, kind, fence, started_at, derived_key, traceparent)
        SELECT $1, $2, $3, $7, 'call', $4, $8, $9, $10 FROM held
        ON CONFLICT DO NOTHING`,
      ),
      params: (start: RenewInput & StepTrace & { point: string; step: string; now: number }) => [
        ...fencedParams(start),
        new Date(start.lockedUntil),
        start.point,
        start.step,
        new Date(start.now),
        ...traceParams(start),
      ],
      result: held,
    }),

    /**
     * After a call, in one statement: checks the fence, renews the lease, moves the recovery
     * point to the step ($6) and records the call's result ($7, with its type annotations $9).
     * False (`held` 0): fenced, nothing written.
     */
    recordCall: prepared('', 'recordCall', {
      text: whileHeld(
        'recorded',
        `INSERT INTO ${s}.steps
          (tenant_id, operation, idempotency_key, step, kind, result, result_meta, fence, started_at, completed_at,
           derived_key, traceparent)
        SELECT $1, $2, $3, $6, 'call', $7, $9, $4, $8, $8, $10, $11 FROM held
        ON CONFLICT (tenant_id, operation, idempotency_key, step)
        DO UPDATE SET result = EXCLUDED.result, result_meta = EXCLUDED.result_meta, fence = EXCLUDED.fence,
          completed_at = EXCLUDED.completed_at`,
      ),
      params: (call: RenewInput & StepResult) => [
        ...fencedParams(call),
        new Date(call.lockedUntil),
        call.step,
        call.json,
        ...recordedParams(call),
      ],
      result: held,
    }),

    /**
     * Frees the key of a multi-step operation that failed for good before it committed anything:
     * no step recorded and no call started (checked here, in the same statement). A retry runs
     * afresh, as after a failed single-transaction operation. True: freed.
     */
    releaseKey: defineStatement({
      text: `DELETE FROM ${s}.requests r
      WHERE r.tenant_id = $1 AND r.operation = $2 AND r.idempotency_key = $3
        AND r.state = 'pending' AND r.fence = $4
        AND NOT EXISTS (SELECT 1 FROM ${s}.steps st
          WHERE st.tenant_id = $1 AND st.operation = $2 AND st.idempotency_key = $3)`,
      params: fencedParams,
      result: touchedRow,
    }),

    /**
     * Ends a multi-step operation that failed for good after it had committed a step or started a
     * call: state 'failed' with the error and the step, replayed to every retry until its
     * tombstone passes. Retention counts from now, as for `completeLate`. False: fenced.
     */
    failLate: defineStatement({
      text: `UPDATE ${s}.requests SET
        state = 'failed', error = $5, error_step = $6, completed_at = $7, expires_at = $8,
        tombstone_until = $9, locked_until = NULL
      WHERE ${pk} AND state = 'pending' AND fence = $4`,
      params: failureParams,
      result: touchedRow,
    }),
  };
}
