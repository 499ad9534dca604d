import type { Clock } from '../core/clock.js';
import type { OperationScope } from '../core/errors.js';
import type { Queryable } from '../core/sql.js';
import type { ReadFirst, Recording, RetentionPolicy } from './options.js';
import type { Outcome } from './outcome.js';
import { decodeRequestRow, type RequestRow } from './request-row.js';
import { renderStatements, type Statements } from './statements.js';

/** A prepared call: validated scope, fingerprint and retention. */
export interface PreparedSpec {
  scope: OperationScope;
  fingerprint: string;
  retention: RetentionPolicy;
  waitMs: number;
  transactionRetries: number;
  /** How `run`/`runIn` record the key. `steps` always claims first. */
  recording: Recording;
  /** Whether `run`/`runIn` read the key before executing. */
  readFirst: ReadFirst;
}

/**
 * The `requests` table as the keyed-operation engines see it: the statements, and the parameter
 * lists they take. Shared by `Idem` (single-transaction operations) and `MultiStepRun`, so neither
 * reaches into the other.
 */
export class RequestStore {
  readonly statements: Statements;

  constructor(
    schema: string,
    readonly clock: Clock,
  ) {
    this.statements = renderStatements(schema);
  }

  async readRow(db: Queryable, scope: OperationScope): Promise<RequestRow | null> {
    const { rows } = await db.query(
      this.statements.read,
      [scope.tenant, scope.operation, scope.key],
      this.statements.names.read,
    );
    return rows[0] ? decodeRequestRow(rows[0]) : null;
  }

  /**
   * Parameters shared by every claim statement: $1..$3 scope, $4 fingerprint, $5..$8 times.
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

  /** The parameters of `complete` ($1..$10) and `completeLate` ($1..$12). */
  completeParams(prepared: PreparedSpec, fence: number, outcome: Outcome<unknown>, late = false): unknown[] {
    const now = this.clock.now();
    const { scope, retention } = prepared;
    const params = [
      scope.tenant,
      scope.operation,
      scope.key,
      fence,
      ...outcomeParams(outcome),
      new Date(now),
    ];
    if (late) params.push(new Date(now + retention.resultMs), new Date(now + retention.tombstoneMs));
    return params;
  }

  /** The parameters of `record` and `recordOverForgotten` ($1..$12; `record` adds $13, the wait). */
  recordParams(prepared: PreparedSpec, outcome: Outcome<unknown>): unknown[] {
    const now = this.clock.now();
    const { scope, retention } = prepared;
    return [
      scope.tenant,
      scope.operation,
      scope.key,
      prepared.fingerprint,
      ...outcomeParams(outcome),
      new Date(now),
      new Date(now + retention.resultMs),
      new Date(now + retention.tombstoneMs),
    ];
  }
}

/** An outcome as the columns state, result, body, resource_type, resource_id. */
function outcomeParams(outcome: Outcome<unknown>): unknown[] {
  return [
    outcome.state,
    JSON.stringify(outcome.value ?? null),
    outcome.body ?? null,
    outcome.resource?.type ?? null,
    outcome.resource?.id ?? null,
  ];
}
