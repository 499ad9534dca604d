import {
  ExpiredError,
  InProgressError,
  KeyReusedError,
  StepFailedError,
  type OperationScope,
} from '../core/errors.js';
import type { OperationResult } from './outcome.js';
import type { RequestRow } from './request-row.js';

/** What to do with a key that already has a row. */
export type Decision<T> =
  | { kind: 'replay'; result: OperationResult<T> }
  | { kind: 'forgotten' }
  | { kind: 'pending'; row: RequestRow };

/**
 * The rules for an existing row, in the order they apply:
 * past its tombstone the key is new again; another fingerprint is refused; a pending one belongs
 * to another execution; a multi-step operation that failed for good answers its stored failure
 * until its tombstone passes; a finished operation replays while its result is kept, then
 * answers "expired" with the resource pointer.
 */
export function decide<T>(
  scope: OperationScope,
  row: RequestRow,
  fingerprint: string,
  now: number,
): Decision<T> {
  if (row.state !== 'pending' && row.tombstoneUntil <= now) return { kind: 'forgotten' };
  if (row.fingerprint !== fingerprint) throw new KeyReusedError(scope, row.fingerprint, fingerprint);
  if (row.state === 'pending') return { kind: 'pending', row };
  if (row.error !== null) throw new StepFailedError(scope, row.errorStep, row.error, undefined, true);
  if (row.expiresAt <= now || (row.result === null && row.body === null)) {
    throw new ExpiredError(scope, row.resource, row.completedAt);
  }
  return {
    kind: 'replay',
    result: {
      value: JSON.parse(row.result ?? 'null') as T,
      state: row.state,
      replayed: true,
      resource: row.resource,
      body: row.body,
    },
  };
}

export function inProgress(scope: OperationScope, row: RequestRow | null, now: number, cause?: unknown) {
  const leaseLeft = row?.lockedUntil != null ? Math.max(0, row.lockedUntil - now) : 0;
  // A hint, not a promise: the lease end for a stalled holder, otherwise a second.
  return new InProgressError(scope, Math.min(Math.max(leaseLeft, 1000), 60_000), cause);
}
