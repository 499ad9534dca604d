import { prepareNames } from '../core/prepared-statements.js';
import { quoteSchema } from '../core/schema-name.js';
import type { QueryResult } from '../core/sql.js';
import { defineStatement, nothing } from '../core/statement.js';
import type { RetentionPolicy } from './options.js';
import type { Outcome } from './outcome.js';
import { decodeRequestRow, requestColumns } from './request-row.js';
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
  type CausedInput,
  type ClaimInput,
  type FencedInput,
  type KeyInput,
} from './statement-parts.js';
import { renderStepStatements } from './step-statements.js';

/**
 * Every statement the keyed-operation engine sends, rendered once per schema, each a typed
 * function (`await statements.claim(tx, { scope, fingerprint, retention, lockedUntil, now, wait })`).
 * Keeping them in one place makes the hot path's round trips countable: a first execution
 * recorded at commit sends the handler's statements and `record` (plus `read` in front when that
 * is on); one recorded claim-first sends `claim`, the handler's statements and `complete`; a
 * replay sends only `read`. The statements of multi-step operations are in step-statements.ts.
 */
export function renderRequestStatements(schema: string) {
  const s = quoteSchema(schema);
  return { ...renderKeyStatements(s), ...renderStepStatements(s) };
}

export type RequestStatements = ReturnType<typeof renderRequestStatements>;

/** What a record of a finished operation writes: the claim's columns, and the outcome. */
interface RecordInput extends KeyInput, CausedInput {
  fingerprint: string;
  retention: RetentionPolicy;
  outcome: Outcome<unknown>;
  now: number;
}

/**
 * The parameters of `record` and `recordOverForgotten` ($1..$12; `record` adds $13, the wait; the
 * cause is last: `record` $14–$15, `recordOverForgotten` $13–$14).
 */
function recordParams(record: RecordInput): unknown[] {
  const { now, retention } = record;
  return [
    ...keyParams(record),
    record.fingerprint,
    ...outcomeParams(record.outcome),
    new Date(now),
    new Date(now + retention.resultMs),
    new Date(now + retention.tombstoneMs),
  ];
}

/** A statement's bounded wait on the key's index entry: a `lock_timeout` interval (`waitInterval`). */
interface Bounded {
  wait: string;
}

/** The statements of a single-transaction operation's key (and the ones multi-step shares). */
function renderKeyStatements(s: string) {
  const record = (key: string, text: string) =>
    prepared('', key, {
      text,
      params: (input: RecordInput & Bounded) => [...recordParams(input), input.wait, ...causeParams(input)],
      result: (r: QueryResult<{ recorded: number }>) => Number(r.rows[0]?.recorded) === 1,
    });
  return {
    read: prepared('', 'read', {
      text: `SELECT ${requestColumns} FROM ${s}.requests WHERE ${pk}`,
      params: keyParams,
      result: (r) => (r.rows[0] ? decodeRequestRow(r.rows[0]) : null),
    }),

    /**
     * Claims a new key inside the caller's transaction, in one round trip.
     * ON CONFLICT DO NOTHING waits while another open transaction holds the same key, and returns
     * no row once that one commits. The bounded wait is `lock_timeout`, set only for this
     * statement: the first CTE sets it (saving the caller's value), the outer SELECT, which runs
     * after the INSERT has finished, puts the caller's value back. A timeout raises 55P03.
     * $9 is the wait, as a PostgreSQL interval string. True: this transaction claimed the key.
     */
    claim: prepared('', 'claim', {
      text: `WITH setting AS (
        SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', $9, true)
      ), inserted AS (
        INSERT INTO ${s}.requests
          (tenant_id, operation, idempotency_key, fingerprint, state, fence, locked_until,
           created_at, expires_at, tombstone_until, caused_by, traceparent)
        SELECT $1, $2, $3, $4, 'pending', 1, $5, $6, $7, $8, $10, $11 FROM setting
        ON CONFLICT DO NOTHING
        RETURNING 1
      )
      SELECT count(*)::int AS claimed, set_config('lock_timeout', (SELECT previous FROM setting), true) AS restored
      FROM inserted`,
      params: (claim: ClaimInput & Bounded) => [...claimParams(claim), claim.wait, ...causeParams(claim)],
      result: (r: QueryResult<{ claimed: number }>) => Number(r.rows[0]?.claimed) === 1,
    }),

    /**
     * Commit-time recording: the completed record, inserted as the last statement of the
     * handler's transaction, instead of a claim before the handler and an UPDATE after it (one
     * statement instead of two; pgbench at c=32 measured BEGIN; INSERT; this; COMMIT at 0.61× a
     * plain one-INSERT transaction against 0.44–0.52× for read; BEGIN; claim; INSERT; complete;
     * COMMIT). A concurrent duplicate's insert waits on the unique index until the first commits,
     * then returns no row; the bounded wait is the same statement-scoped `lock_timeout` as the
     * claim's ($13). False (`recorded` 0): the key has a row, read it and decide. The wrapper that
     * bounds the wait costs little: BEGIN; INSERT; this; COMMIT ran at 6,380 tps against 6,684
     * with a bare INSERT … ON CONFLICT DO NOTHING (pgbench, prepared, c=16, three alternating 5 s
     * rounds on the 2-core bench machine, a plain BEGIN; INSERT; COMMIT at 8,860): within the spread.
     */
    record: record('record', recordStatement(s, 'ON CONFLICT DO NOTHING')),

    /**
     * `record` for a transaction that sends it together with COMMIT (a pipelined pool, see
     * `queryAndCommit` in core/sql.ts, and `withCommit`): with no ON CONFLICT, a key that already
     * has a row raises 23505, which aborts the transaction, so the COMMIT behind it rolls the
     * handler's writes back. (With DO NOTHING, the COMMIT would keep them without a record.) The
     * caller reads the row afterwards; a row whose tombstone passed is taken over by running
     * `record` again.
     */
    recordOrFail: record('recordOrFail', recordStatement(s, '')),

    /** Commit-time recording over a key whose tombstone has passed: it is new again. */
    recordOverForgotten: defineStatement({
      text: `UPDATE ${s}.requests SET
        fingerprint = $4, state = $5, fence = fence + 1, locked_until = NULL, recovery_point = NULL,
        result = $6, body = $7, resource_type = $8, resource_id = $9, error = NULL, error_step = NULL,
        created_at = $10, completed_at = $10, expires_at = $11, tombstone_until = $12,
        caused_by = $13, traceparent = $14
      WHERE ${pk} AND state <> 'pending' AND tombstone_until <= $10
      RETURNING fence`,
      params: (input: RecordInput) => [...recordParams(input), ...causeParams(input)],
      result: touchedRow,
    }),

    /** Reuses a key whose tombstone has passed: it is new again. Its new fence, or null. */
    reclaimForgotten: defineStatement({
      text: `UPDATE ${s}.requests SET
        fingerprint = $4, state = 'pending', fence = fence + 1, locked_until = $5, recovery_point = NULL,
        result = NULL, body = NULL, resource_type = NULL, resource_id = NULL, error = NULL, error_step = NULL,
        created_at = $6, completed_at = NULL, expires_at = $7, tombstone_until = $8,
        caused_by = $9, traceparent = $10
      WHERE ${pk} AND tombstone_until <= $6
      RETURNING fence`,
      params: (claim: ClaimInput) => [...claimParams(claim), ...causeParams(claim)],
      result: fenceOf,
    }),

    /** Forgets the steps of a key that is being reused after its tombstone passed. */
    forgetSteps: defineStatement({
      text: `DELETE FROM ${s}.steps WHERE ${pk}`,
      params: keyParams,
      result: nothing,
    }),

    /**
     * Stores the outcome of a single-transaction operation. It sets no indexed column (expiry was
     * fixed at the claim), so on a page with room it is a HOT update: no index writes.
     */
    complete: prepared('', 'complete', {
      text: `UPDATE ${s}.requests SET
        state = $5, result = $6, body = $7, resource_type = $8, resource_id = $9,
        completed_at = $10, locked_until = NULL
      WHERE ${pk} AND state = 'pending' AND fence = $4`,
      params: (done: FencedInput & { outcome: Outcome<unknown>; now: number }) => [
        ...fencedParams(done),
        ...outcomeParams(done.outcome),
        new Date(done.now),
      ],
      result: nothing,
    }),

    /** The sweeper's batches, as the core sweeper runs them ($1 cutoff, $2 batch size; see `sweepBodies`). */
    sweep: {
      bodies: sweepBodies(s, ''),
      rows: sweepRows(s, ''),
      /** The sweeper's batches in one tenant ($3), for a sweeper scoped to tenants. */
      bodiesTenant: sweepBodies(s, 'tenant_id = $3 AND '),
      rowsTenant: sweepRows(s, 'tenant_id = $3 AND '),
    },
  };
}

/**
 * The sweeper's batches address rows by ctid: the locked rows cannot move while the statement
 * holds them, and a ctid lookup skips re-finding each row through the primary key (about 4
 * buffer hits per row measured on a 1000-row batch). `pin` limits them to one tenant.
 */
function sweepBodies(s: string, pin: string): string {
  return `UPDATE ${s}.requests SET result = NULL, body = NULL
      WHERE ${pin}ctid = ANY(ARRAY(
        SELECT ctid FROM ${s}.requests
        WHERE ${pin}expires_at <= $1 AND (result IS NOT NULL OR body IS NOT NULL) AND state <> 'pending'
        LIMIT $2 FOR UPDATE SKIP LOCKED
      ))`;
}

function sweepRows(s: string, pin: string): string {
  return `DELETE FROM ${s}.requests
      WHERE ${pin}ctid = ANY(ARRAY(
        SELECT ctid FROM ${s}.requests
        WHERE ${pin}tombstone_until <= $1 AND (state <> 'pending' OR locked_until IS NULL OR locked_until <= $1)
        LIMIT $2 FOR UPDATE SKIP LOCKED
      ))`;
}

/**
 * The completed record, inserted with a statement-scoped bounded wait (`lock_timeout` $13, set by
 * the first CTE and put back by the outer SELECT). `onConflict` is `ON CONFLICT DO NOTHING` for
 * `record` (no row back: the key has one) or empty for `recordOrFail` (23505).
 */
function recordStatement(s: string, onConflict: string): string {
  return `WITH setting AS (
        SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', $13, true)
      ), inserted AS (
        INSERT INTO ${s}.requests
          (tenant_id, operation, idempotency_key, fingerprint, state, fence, result, body,
           resource_type, resource_id, created_at, completed_at, expires_at, tombstone_until,
           caused_by, traceparent)
        SELECT $1, $2, $3, $4, $5, 1, $6, $7, $8, $9, $10, $10, $11, $12, $14, $15 FROM setting
        ${onConflict}
        RETURNING 1
      )
      SELECT count(*)::int AS recorded, set_config('lock_timeout', (SELECT previous FROM setting), true) AS restored
      FROM inserted`;
}

/**
 * The statements' texts by name, with a prepared-statement name for each (`names`), as they were
 * before the statements became functions: for what reads the SQL itself rather than running it
 * through idem, the distribution check (test/scale-out) and the benchmarks' floor (bench/lib).
 */
export function renderStatements(schema: string) {
  const { sweep, ...statements } = renderRequestStatements(schema);
  const texts = {
    ...(Object.fromEntries(Object.entries(statements).map(([key, statement]) => [key, statement.text])) as {
      [K in keyof typeof statements]: string;
    }),
    sweepBodies: sweep.bodies,
    sweepRows: sweep.rows,
    sweepBodiesTenant: sweep.bodiesTenant,
    sweepRowsTenant: sweep.rowsTenant,
  };
  return { ...texts, names: prepareNames('', texts) };
}

export type Statements = ReturnType<typeof renderStatements>;
