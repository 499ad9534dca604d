/**
 * What the statements of a key share (statements.ts, step-statements.ts, intent-statements.ts):
 * their common inputs, how those become `$1, $2, …`, and their result shapes.
 */
import type { Causation } from '../core/causation.js';
import type { OperationScope } from '../core/errors.js';
import type { QueryResult } from '../core/sql.js';

import type { RetentionPolicy } from './options.js';
import type { Outcome } from './outcome.js';

/** The key's row in the WHERE clause of a statement of one key. */
export const pk = `tenant_id = $1 AND operation = $2 AND idempotency_key = $3`;

/** $1..$3 of every statement of a key: its tenant, operation and idempotency key. */
export interface KeyInput {
  scope: OperationScope;
}

/** A statement of a key that its holder sends: $4 is the fence it holds the key with. */
export interface FencedInput extends KeyInput {
  fence: number;
}

/** What a new key's row names as its cause (`requests.caused_by`, `traceparent`). */
export interface CausedInput {
  /** The intent the operation was started in, and the trace context its call came in. */
  cause: Causation;
}

/** The causation columns of a new key's row, sent as a statement's last two parameters. */
export function causeParams({ cause }: CausedInput): [string | null, string | null] {
  return [cause.intent, cause.traceparent];
}

/**
 * What a claim writes: $1..$3 the key, $4 its fingerprint, $5..$8 the lease and the times; its
 * cause goes last (`causeParams`).
 */
export interface ClaimInput extends KeyInput, CausedInput {
  fingerprint: string;
  retention: RetentionPolicy;
  /** The holder's lease end (a multi-step operation), or null (one transaction holds the key). */
  lockedUntil: number | null;
  now: number;
}

/** $1..$3: the key. */
export function keyParams({ scope }: KeyInput): [string, string, string] {
  return [scope.tenant, scope.operation, scope.key];
}

/** $1..$4: the key and the fence. */
export function fencedParams(input: FencedInput): unknown[] {
  return [...keyParams(input), input.fence];
}

/**
 * Parameters shared by every claim statement: $1..$3 scope, $4 fingerprint, $5..$8 times.
 * A single-transaction claim fixes the retention now (it commits together with its result); a
 * multi-step claim keeps the whole tombstone window until `completeLate` sets it from completion.
 */
export function claimParams(claim: ClaimInput): unknown[] {
  const { retention, lockedUntil, now } = claim;
  const resultMs = lockedUntil === null ? retention.resultMs : retention.tombstoneMs;
  return [
    ...keyParams(claim),
    claim.fingerprint,
    lockedUntil === null ? null : new Date(lockedUntil),
    new Date(now),
    new Date(now + resultMs),
    new Date(now + retention.tombstoneMs),
  ];
}

/** An outcome as the columns state, result, body, resource_type, resource_id. */
export function outcomeParams(outcome: Outcome<unknown>): unknown[] {
  return [
    outcome.state,
    JSON.stringify(outcome.value ?? null),
    outcome.body ?? null,
    outcome.resource?.type ?? null,
    outcome.resource?.id ?? null,
  ];
}

/** Result shape of a statement that returns the key's fence: it, or null when no row came back. */
export function fenceOf(result: QueryResult<{ fence: number }>): number | null {
  const row = result.rows[0];
  return row ? Number(row.fence) : null;
}

/** Result shape of an UPDATE or DELETE of the key's row: whether it touched it. */
export function touchedRow(result: QueryResult): boolean {
  return result.rowCount === 1;
}

/** Result shape of a statement that counts what it did as `done`: whether that is 1. */
export function doneOnce(result: QueryResult<{ done: number }>): boolean {
  return Number(result.rows[0]?.done) === 1;
}

export { preparedStatement as prepared } from '../core/statement.js';
