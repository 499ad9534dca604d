import { quoteSchema } from '../core/schema-name.js';
import type { QueryResult } from '../core/sql.js';
import { allRows, defineStatement, nothing } from '../core/statement.js';
import type { GiveUpAction } from './options.js';
import {
  causeParams,
  claimParams,
  doneOnce,
  fencedParams,
  fenceOf,
  keyParams,
  pk,
  prepared,
  type ClaimInput,
  type FencedInput,
  type KeyInput,
} from './statement-parts.js';
import { completionParams, failureParams } from './step-statements.js';

/** A defined operation's input as stored in `intents`: its plain JSON and its type annotations. */
interface InputColumns {
  json: string;
  meta: string | null;
}

/** An intent a completer's round took (`takeDue`). */
export interface DueIntentRow {
  tenant_id: string;
  operation: string;
  idempotency_key: string;
  input: string;
  input_meta: string | null;
  attempts: number;
  give_up: GiveUpAction | null;
  last_error: string | null;
}

/** A pending intent as operators list it (`list`). */
export interface PendingIntentRow {
  tenant_id: string;
  operation: string;
  idempotency_key: string;
  attempts: number;
  last_error: string | null;
  next_attempt_at: Date;
  give_up: GiveUpAction | null;
  created_at: Date;
  recovery_point: string | null;
  locked_until: Date | null;
}

/**
 * The statements of defined operations (`idem.define`) and their completer, beside the ones of
 * every multi-step operation (step-statements.ts): a defined operation keeps its input in
 * `intents` while it is pending, so each statement that starts or ends one writes both tables at
 * once. Only `claim` is prepared (named); the others are sent unnamed.
 */
export function renderIntentStatements(schema: string) {
  const s = quoteSchema(schema);
  const joined = `i.tenant_id = c.tenant_id AND i.operation = c.operation AND i.idempotency_key = c.idempotency_key`;
  /**
   * A holder's end of the operation (`SET` the columns `set`, fenced by $4) that also forgets its
   * intent, in one statement. False (`done` 0): fenced, nothing written.
   */
  const endAndForget = <Input extends FencedInput>(set: string, params: (input: Input) => unknown[]) =>
    defineStatement({
      text: `WITH done AS (
        UPDATE ${s}.requests SET
          ${set}
        WHERE ${pk} AND state = 'pending' AND fence = $4
        RETURNING 1
      ), gone AS (
        DELETE FROM ${s}.intents WHERE ${pk} AND EXISTS (SELECT 1 FROM done)
      )
      SELECT count(*)::int AS done FROM done`,
      params,
      result: doneOnce,
    });
  return {
    /**
     * `claimCommitted` and the intent in one statement: $1..$8 as `claimParams` (with the lease
     * end $5, which is also when a completer may first look), $9 the input's JSON, $10 its type
     * annotations. Null (no row back): the key exists.
     */
    claim: prepared('intent', 'claim', {
      text: `WITH claimed AS (
        INSERT INTO ${s}.requests
          (tenant_id, operation, idempotency_key, fingerprint, state, fence, locked_until,
           created_at, expires_at, tombstone_until, caused_by, traceparent)
        VALUES ($1, $2, $3, $4, 'pending', 1, $5, $6, $7, $8, $11, $12)
        ON CONFLICT DO NOTHING
        RETURNING fence
      ), kept AS (
        INSERT INTO ${s}.intents (tenant_id, operation, idempotency_key, input, input_meta, next_attempt_at, created_at)
        SELECT $1, $2, $3, $9, $10, $5, $6 FROM claimed
      )
      SELECT fence FROM claimed`,
      params: (claim: ClaimInput & { lockedUntil: number; input: InputColumns }) => [
        ...claimParams(claim),
        claim.input.json,
        claim.input.meta,
        ...causeParams(claim),
      ],
      result: fenceOf,
    }),

    /**
     * Keeps the input of an operation already claimed (HTTP steps mode, where the key is claimed
     * before the handler names its definition): $4 the fence, $5 input, $6 annotations, $7 now.
     * Nothing (0 rows) when the fence moved; an intent kept by an earlier execution stays.
     */
    adopt: defineStatement({
      text: `INSERT INTO ${s}.intents (tenant_id, operation, idempotency_key, input, input_meta, next_attempt_at, created_at)
      SELECT tenant_id, operation, idempotency_key, $5, $6, coalesce(locked_until, $7), $7
      FROM ${s}.requests WHERE ${pk} AND state = 'pending' AND fence = $4
      ON CONFLICT DO NOTHING`,
      params: (adopt: FencedInput & { input: InputColumns; now: number }) => [
        ...fencedParams(adopt),
        adopt.input.json,
        adopt.input.meta,
        new Date(adopt.now),
      ],
      result: (r: QueryResult) => r.rowCount,
    }),

    /** `completeLate` that also forgets the intent. False (`done` 0): fenced. */
    complete: endAndForget(
      `state = $5, result = $6, body = $7, resource_type = $8, resource_id = $9,
          completed_at = $10, expires_at = $11, tombstone_until = $12, locked_until = NULL`,
      completionParams,
    ),

    /** `failLate` that also forgets the intent. False (`done` 0): fenced. */
    fail: endAndForget(
      `state = 'failed', error = $5, error_step = $6, completed_at = $7, expires_at = $8,
          tombstone_until = $9, locked_until = NULL`,
      failureParams,
    ),

    /**
     * The completer's round, in one statement: takes up to $3 due intents of the operations it
     * has code for ($2), skipping rows another completer holds. Of those, the ones whose holder's
     * lease has lapsed are returned, with their attempt counted and pushed to $4 (so no other
     * completer takes them while this one runs them); ones whose holder is alive (a long call
     * kept by heartbeats) move to their lease end; ones no longer pending (finished by a client's
     * retry through a path that kept its intent) are forgotten. $1 now.
     */
    takeDue: defineStatement({
      text: `WITH candidates AS (
        SELECT i.tenant_id, i.operation, i.idempotency_key, r.state, r.locked_until
        FROM ${s}.intents i
        JOIN ${s}.requests r USING (tenant_id, operation, idempotency_key)
        WHERE i.next_attempt_at <= $1 AND i.operation = ANY($2::text[])
        ORDER BY i.next_attempt_at
        LIMIT $3
        FOR UPDATE OF i SKIP LOCKED
      ), alive AS (
        UPDATE ${s}.intents i SET next_attempt_at = c.locked_until FROM candidates c
        WHERE ${joined} AND c.state = 'pending' AND c.locked_until > $1
      ), finished AS (
        DELETE FROM ${s}.intents i USING candidates c WHERE ${joined} AND c.state <> 'pending'
      )
      UPDATE ${s}.intents i SET next_attempt_at = $4, attempts = i.attempts + 1
      FROM candidates c
      WHERE ${joined} AND c.state = 'pending' AND (c.locked_until IS NULL OR c.locked_until <= $1)
      RETURNING i.tenant_id, i.operation, i.idempotency_key, i.input, i.input_meta, i.attempts, i.give_up, i.last_error`,
      params: (round: { now: number; operations: string[]; limit: number; takenUntil: number }) => [
        new Date(round.now),
        round.operations,
        round.limit,
        new Date(round.takenUntil),
      ],
      result: allRows<DueIntentRow>,
    }),

    /**
     * Takes over an abandoned operation by its key, whatever its fence: raises the fence (so a
     * holder that was only slow is refused from its next write) and takes the lease. Null (no row
     * back): it finished, or its holder renewed the lease meanwhile. $4 the new lease end, $5 now.
     */
    takeOver: defineStatement({
      text: `UPDATE ${s}.requests SET fence = fence + 1, locked_until = $4
      WHERE ${pk} AND state = 'pending' AND (locked_until IS NULL OR locked_until <= $5)
      RETURNING fence, fingerprint`,
      params: (take: KeyInput & { lockedUntil: number; now: number }) => [
        ...keyParams(take),
        new Date(take.lockedUntil),
        new Date(take.now),
      ],
      result: fenceOf,
    }),

    /**
     * `releaseLease` after a retryable failure ($5 now): a client's retry may resume at once;
     * the intent is due for a completer at $6 (a lease later), unless it is already due later.
     */
    release: defineStatement({
      text: `WITH released AS (
        UPDATE ${s}.requests SET locked_until = $5
        WHERE ${pk} AND state = 'pending' AND fence = $4
        RETURNING 1
      )
      UPDATE ${s}.intents SET next_attempt_at = greatest(next_attempt_at, $6)
      WHERE ${pk} AND EXISTS (SELECT 1 FROM released)`,
      params: (release: FencedInput & { now: number; dueAt: number }) => [
        ...fencedParams(release),
        new Date(release.now),
        new Date(release.dueAt),
      ],
      result: nothing,
    }),

    /** After a completer's failed attempt: when to try again ($4), and why it failed ($5). */
    postpone: defineStatement({
      text: `UPDATE ${s}.intents SET next_attempt_at = $4, last_error = $5 WHERE ${pk}`,
      params: (postpone: KeyInput & { dueAt: number; error: string }) => [
        ...keyParams(postpone),
        new Date(postpone.dueAt),
        postpone.error,
      ],
      result: nothing,
    }),

    /**
     * An operator's decision ($4: 'compensate', 'fail', or NULL to withdraw it), due at once ($5).
     * False: the key has no pending intent.
     */
    decide: defineStatement({
      text: `UPDATE ${s}.intents SET give_up = $4, next_attempt_at = least(next_attempt_at, $5)
      WHERE ${pk}
      RETURNING attempts`,
      params: (decision: KeyInput & { action: GiveUpAction | null; now: number }) => [
        ...keyParams(decision),
        decision.action,
        new Date(decision.now),
      ],
      result: (r: QueryResult) => r.rows.length === 1,
    }),

    /** Pending intents, oldest first, for operators ($1 limit; $2 operation or NULL). */
    list: defineStatement({
      text: `SELECT i.tenant_id, i.operation, i.idempotency_key, i.attempts, i.last_error, i.next_attempt_at,
        i.give_up, i.created_at, r.recovery_point, r.locked_until
      FROM ${s}.intents i JOIN ${s}.requests r USING (tenant_id, operation, idempotency_key)
      WHERE ($2::text IS NULL OR i.operation = $2)
      ORDER BY i.created_at, i.tenant_id, i.operation, i.idempotency_key
      LIMIT $1`,
      params: (list: { limit: number; operation: string | null }) => [list.limit, list.operation],
      result: allRows<PendingIntentRow>,
    }),

    /** How many are waiting, and how many of those are due now ($1), for metrics. */
    count: defineStatement({
      text: `SELECT count(*)::int AS waiting, count(*) FILTER (WHERE next_attempt_at <= $1)::int AS due
      FROM ${s}.intents`,
      params: (count: { now: number }) => [new Date(count.now)],
      result: (r: QueryResult<{ waiting: number; due: number }>) => r.rows[0]!,
    }),
  };
}

export type IntentStatements = ReturnType<typeof renderIntentStatements>;
