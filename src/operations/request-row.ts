import { toMillis } from '../core/clock.js';
import type { ResourcePointer } from '../core/errors.js';

/** A `requests` row as the engine reads it. Times are epoch milliseconds. */
export interface RequestRow {
  fingerprint: string;
  state: 'pending' | 'completed' | 'failed';
  fence: number;
  lockedUntil: number | null;
  recoveryPoint: string | null;
  result: string | null;
  body: Uint8Array | null;
  resource: ResourcePointer | null;
  completedAt: number | null;
  expiresAt: number;
  tombstoneUntil: number;
  /** A multi-step operation that failed for good: the error's text (state `failed`), else null. */
  error: string | null;
  /** The step it failed at (null: between steps, or no failure). */
  errorStep: string | null;
}

/** The column list every read of a request uses, in the order `decodeRequestRow` expects. */
export const requestColumns = `fingerprint, state, fence, locked_until, recovery_point, result, body,
  resource_type, resource_id, completed_at, expires_at, tombstone_until, error, error_step`;

export function decodeRequestRow(row: Record<string, unknown>): RequestRow {
  const resourceType = row.resource_type as string | null;
  const resourceId = row.resource_id as string | null;
  return {
    fingerprint: row.fingerprint as string,
    state: row.state as RequestRow['state'],
    fence: Number(row.fence),
    lockedUntil: toMillis(row.locked_until),
    recoveryPoint: row.recovery_point as string | null,
    result: row.result as string | null,
    body: (row.body as Uint8Array | null) ?? null,
    resource: resourceType !== null && resourceId !== null ? { type: resourceType, id: resourceId } : null,
    completedAt: toMillis(row.completed_at),
    expiresAt: toMillis(row.expires_at)!,
    tombstoneUntil: toMillis(row.tombstone_until)!,
    error: (row.error as string | null | undefined) ?? null,
    errorStep: (row.error_step as string | null | undefined) ?? null,
  };
}
