import { quoteSchema } from '../core/schema-name.js';
import type { Causation } from '../core/causation.js';
import { affectedRows, allRows, defineStatement, firstRow, nothing } from '../core/statement.js';
import { deletedColumn, sweepStatement as sweepBatch, tenantSweepStatement } from '../core/sweeper.js';
import type { SagaRef } from './definition.js';
import type { SagaStatus } from './saga-record.js';

// *_meta: a result's type annotations beside its plain JSON (migration 0009; NULL for plain JSON).
const sagaColumns = `tenant_id, saga, saga_key, fingerprint, status, input, cursor, fence, locked_until,
  result, result_meta, error, stuck_error, created_at, updated_at, finished_at`;
const stepColumns = `position, name, action_key, compensation_key, state, result, result_meta,
  compensation_result, compensation_result_meta, compensation_attempts, fence, registered_at, done_at,
  compensated_at`;

/** A saga row (`sagaColumns`), decoded by `decodeSaga`. */
export type SagaRow = Record<string, unknown>;

/** The holder of a saga: its (tenant, saga, key) and the fence it claimed. */
export interface Holder {
  ref: SagaRef;
  fence: number;
}

/** A step's record, written by the holder at `position`: its result (JSON) with its type annotations. */
export interface StepWrite extends Holder {
  position: number;
  result: string;
  meta: string | null;
  now: Date;
}

/** A holder's new lease: until `leaseUntil`, taken at `now`. */
export interface Lease {
  leaseUntil: Date;
  now: Date;
}

/** What a takeover or an unstick answers: where the saga is, under its new fence. */
export interface ClaimedSaga {
  fence: number;
  status: string;
  cursor: number;
  error: string | null;
}

/** $1..$3: the saga's primary key. */
const pk = (ref: SagaRef) => [ref.tenant, ref.saga, ref.key];
/** $1..$4: the saga's primary key and the holder's fence. */
const held = (h: Holder) => [...pk(h.ref), h.fence];
/** $1..$6: the holder and its new lease (`takeOver`, `fence`). */
const leased = (l: Holder & Lease) => [...held(l), l.leaseUntil, l.now];
/** $1..$8 of `stepDone` and `stepCompensated`. */
const stepParams = (w: StepWrite) => [...held(w), w.position, w.result, w.now, w.meta];

/**
 * Every statement of the saga engine, rendered once per schema, all sent unnamed. $1..$3 are
 * always the saga's (tenant, saga, key) and $4 the holder's fence where there is one: every write
 * after the claim checks the fence, so a holder whose lease was taken over cannot move the saga.
 */
export function renderSagaStatements(schema: string) {
  const s = quoteSchema(schema);
  const pkWhere = `tenant_id = $1 AND saga = $2 AND saga_key = $3`;
  /**
   * `stepDone` and `stepCompensated`: records a step's outcome (`update`, named `cte`) and moves
   * the cursor past it (`step`: `+ 1` forward, `- 1` backward), in one statement, fenced.
   */
  const stepWrite = (cte: string, update: string, step: '+ 1' | '- 1') =>
    defineStatement({
      text: `WITH ${cte} AS (
        ${update}
        RETURNING position
      )
      UPDATE ${s}.sagas SET cursor = $5 ${step}, updated_at = $7
      WHERE ${pkWhere} AND fence = $4 AND EXISTS (SELECT 1 FROM ${cte})`,
      params: stepParams,
      result: affectedRows,
    });
  return {
    /** Starts an instance; no row back means it exists. Commits at once (outside any step). */
    insert: defineStatement({
      text: `INSERT INTO ${s}.sagas
        (tenant_id, saga, saga_key, fingerprint, status, input, cursor, fence, locked_until, created_at, updated_at,
         intent, traceparent)
      VALUES ($1, $2, $3, $4, 'running', $5, 0, 1, $6, $7, $7, $8, $9)
      ON CONFLICT DO NOTHING
      RETURNING fence`,
      params: (i: {
        ref: SagaRef;
        fingerprint: string;
        input: string;
        leaseUntil: Date | null;
        now: Date;
        /** The intent and trace context the saga was started in (`core/causation.ts`). */
        cause: Causation;
      }) => [...pk(i.ref), i.fingerprint, i.input, i.leaseUntil, i.now, i.cause.intent, i.cause.traceparent],
      result: firstRow<{ fence: number }>,
    }),

    read: defineStatement({
      text: `SELECT ${sagaColumns} FROM ${s}.sagas WHERE ${pkWhere}`,
      params: pk,
      result: firstRow<SagaRow>,
    }),

    readSteps: defineStatement({
      text: `SELECT ${stepColumns} FROM ${s}.saga_steps WHERE ${pkWhere} ORDER BY position`,
      params: pk,
      result: allRows<Record<string, unknown>>,
    }),

    /** Takes over an unfinished instance whose holder's lease lapsed. Raises the fence. */
    takeOver: defineStatement({
      text: `UPDATE ${s}.sagas SET fence = fence + 1, locked_until = $5, updated_at = $6
      WHERE ${pkWhere} AND fence = $4 AND status IN ('running', 'compensating')
        AND (locked_until IS NULL OR locked_until <= $6)
      RETURNING fence, status, cursor, error`,
      params: leased,
      result: firstRow<ClaimedSaga>,
    }),

    /**
     * Checks the fence and the direction, renews the lease, and row-locks the saga until the
     * step's transaction ends: a takeover waits for a step in flight instead of racing it.
     */
    fence: defineStatement({
      text: `UPDATE ${s}.sagas SET locked_until = $5, updated_at = $6
      WHERE ${pkWhere} AND fence = $4 AND status = $7
      RETURNING cursor`,
      params: (f: Holder & Lease & { status: SagaStatus }) => [...leased(f), f.status],
      result: affectedRows,
    }),

    /** Persists a step and its compensation's key before the action runs. */
    registerStep: defineStatement({
      text: `INSERT INTO ${s}.saga_steps
        (tenant_id, saga, saga_key, position, name, action_key, compensation_key, state, fence, registered_at)
      VALUES ($1, $2, $3, $5, $6, $7, $8, 'registered', $4, $9)
      ON CONFLICT DO NOTHING`,
      params: (
        r: Holder & {
          position: number;
          name: string;
          actionKey: string;
          compensationKey: string | null;
          now: Date;
        },
      ) => [...held(r), r.position, r.name, r.actionKey, r.compensationKey, r.now],
      result: nothing,
    }),

    /**
     * Records the action's result ($6, with its type annotations $8) and moves the forward cursor
     * past it, in one statement.
     */
    stepDone: stepWrite(
      'done',
      `UPDATE ${s}.saga_steps SET state = 'done', result = $6, result_meta = $8, done_at = $7
        WHERE ${pkWhere} AND position = $5 AND state = 'registered'`,
      '+ 1',
    ),

    /** Turns the saga backward at the failed step (which is compensated first). */
    startCompensating: defineStatement({
      text: `UPDATE ${s}.sagas SET status = 'compensating', cursor = $5, error = $6, updated_at = $7
      WHERE ${pkWhere} AND fence = $4 AND status = 'running'`,
      params: (t: Holder & { position: number; error: string; now: Date }) => [
        ...held(t),
        t.position,
        t.error,
        t.now,
      ],
      result: affectedRows,
    }),

    /**
     * Records a compensation ($6, with its type annotations $8) and moves the backward cursor below
     * it, in one statement.
     */
    stepCompensated: stepWrite(
      'compensated',
      `UPDATE ${s}.saga_steps SET state = 'compensated', compensation_result = $6,
          compensation_result_meta = $8, compensated_at = $7
        WHERE ${pkWhere} AND position = $5 AND state <> 'compensated'`,
      '- 1',
    ),

    /** Counts a failed compensation attempt (durably: the count survives crashes). */
    compensationFailed: defineStatement({
      text: `WITH fenced AS (
        SELECT 1 FROM ${s}.sagas WHERE ${pkWhere} AND fence = $4 AND status = 'compensating' FOR UPDATE
      )
      UPDATE ${s}.saga_steps SET compensation_attempts = compensation_attempts + 1
      WHERE ${pkWhere} AND position = $5 AND EXISTS (SELECT 1 FROM fenced)
      RETURNING compensation_attempts`,
      params: (c: Holder & { position: number }) => [...held(c), c.position],
      result: firstRow<{ compensation_attempts: number }>,
    }),

    /**
     * Ends the saga: $5 the final status, $6 its result and $9 the result's type annotations, from
     * $8 the status it had.
     */
    finish: defineStatement({
      text: `UPDATE ${s}.sagas SET status = $5, result = $6, result_meta = $9, finished_at = $7, updated_at = $7,
        locked_until = NULL
      WHERE ${pkWhere} AND fence = $4 AND status = $8`,
      params: (
        f: Holder & {
          status: 'completed' | 'compensated';
          result: string | null;
          meta: string | null;
          now: Date;
          from: 'running' | 'compensating';
        },
      ) => [...held(f), f.status, f.result, f.now, f.from, f.meta],
      result: affectedRows,
    }),

    /** Parks the saga for an operator; the lease is released. */
    markStuck: defineStatement({
      text: `UPDATE ${s}.sagas SET status = 'stuck', stuck_error = $5, updated_at = $6, locked_until = NULL
      WHERE ${pkWhere} AND fence = $4 AND status = 'compensating'`,
      params: (m: Holder & { error: string; now: Date }) => [...held(m), m.error, m.now],
      result: affectedRows,
    }),

    /** An operator's retry of a stuck saga: back to compensating under a new fence. */
    unstick: defineStatement({
      text: `UPDATE ${s}.sagas SET status = 'compensating', fence = fence + 1, locked_until = $4,
        updated_at = $5, stuck_error = NULL
      WHERE ${pkWhere} AND status = 'stuck'
      RETURNING fence, cursor`,
      params: (u: { ref: SagaRef; leaseUntil: Date; now: Date }) => [...pk(u.ref), u.leaseUntil, u.now],
      result: firstRow<{ fence: number; cursor: number }>,
    }),

    resetCompensationAttempts: defineStatement({
      text: `UPDATE ${s}.saga_steps SET compensation_attempts = 0
      WHERE ${pkWhere} AND position = $4`,
      params: (r: { ref: SagaRef; position: number }) => [...pk(r.ref), r.position],
      result: nothing,
    }),

    list: defineStatement({
      text: `SELECT ${sagaColumns} FROM ${s}.sagas
      WHERE status = ANY($1::text[]) AND ($2::text IS NULL OR saga = $2)
      ORDER BY updated_at, tenant_id, saga, saga_key LIMIT $3`,
      params: (l: { statuses: readonly SagaStatus[]; saga: string | null; limit: number }) => [
        l.statuses,
        l.saga,
        l.limit,
      ],
      result: allRows<SagaRow>,
    }),

    /** Deletes finished sagas past their retention (see `sweepStatement`); answers how many. */
    sweep: sweepBatch(sweepStatement(s, null), deletedColumn),
    /** `sweep` of one tenant ($3), for a sweeper scoped to tenants. */
    sweepTenant: tenantSweepStatement(sweepStatement(s, '$3'), deletedColumn),

    /** Unfinished sagas whose holder is gone (recovery). Uses the partial index sagas_unfinished. */
    lapsed: defineStatement({
      text: `SELECT tenant_id, saga, saga_key FROM ${s}.sagas
      WHERE status IN ('running', 'compensating') AND (locked_until IS NULL OR locked_until <= $1)
      ORDER BY updated_at LIMIT $2`,
      params: ({ now, limit }: { now: Date; limit: number }) => [now, limit],
      result: allRows<{ tenant_id: string; saga: string; saga_key: string }>,
    }),
  };
}

/**
 * Deletes finished sagas past their retention, with their steps (ON DELETE CASCADE), in one
 * bounded batch that skips rows someone holds. Uses the partial index sagas_finished. `tenant`
 * (a parameter) limits it to one tenant.
 */
function sweepStatement(s: string, tenant: string | null): string {
  return `WITH due AS (
        SELECT tenant_id, saga, saga_key FROM ${s}.sagas
        WHERE ${tenant === null ? '' : `tenant_id = ${tenant} AND `}status IN ('completed', 'compensated')
          AND finished_at <= $1
        ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED
      ), gone AS (
        DELETE FROM ${s}.sagas x USING due
        WHERE ${tenant === null ? '' : `x.tenant_id = ${tenant} AND `}x.tenant_id = due.tenant_id
          AND x.saga = due.saga AND x.saga_key = due.saga_key
        RETURNING 1
      )
      SELECT count(*)::int AS deleted FROM gone`;
}

export type SagaStatements = ReturnType<typeof renderSagaStatements>;
