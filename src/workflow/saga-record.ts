import { parseJsonColumn } from '../core/json-column.js';
import { toMillis } from '../core/clock.js';
import { decodeResult } from '../steps/result-codec.js';
import type { SagaRef } from './definition.js';

/** Where a saga instance is. */
export type SagaStatus = 'running' | 'compensating' | 'completed' | 'compensated' | 'stuck';

/** Where one step is. */
export type SagaStepState = 'registered' | 'done' | 'compensated';

/** A step as stored. */
export interface SagaStepRecord {
  position: number;
  name: string;
  actionKey: string;
  compensationKey: string | null;
  state: SagaStepState;
  /** The action's result, when recorded: what the action returned, with the same types. */
  result: unknown;
  /** The compensation's result, when recorded. */
  compensationResult: unknown;
  /** Failed compensation attempts so far, across processes. */
  compensationAttempts: number;
  registeredAt: number;
  doneAt: number | null;
  compensatedAt: number | null;
}

/** A saga instance as stored, for operators and tests. */
export interface SagaRecord extends SagaRef {
  status: SagaStatus;
  input: unknown;
  /** Forward: the next step to run. Backward: the next step to compensate (-1: none left). */
  cursor: number;
  fence: number;
  lockedUntil: number | null;
  result: unknown;
  /** Why the saga went backward. */
  error: string | null;
  /** Why it is stuck. */
  stuckError: string | null;
  createdAt: number;
  updatedAt: number;
  finishedAt: number | null;
  fingerprint: string;
  steps?: SagaStepRecord[];
}

/** A saga instance's reference from the columns that name it (tenant_id, saga, saga_key). */
export function sagaRefOf(row: Record<string, unknown>): SagaRef {
  return { tenant: row.tenant_id as string, saga: row.saga as string, key: row.saga_key as string };
}

export function decodeSaga(row: Record<string, unknown>): SagaRecord {
  return {
    ...sagaRefOf(row),
    fingerprint: row.fingerprint as string,
    status: row.status as SagaStatus,
    input: parseJsonColumn(row.input),
    cursor: Number(row.cursor),
    fence: Number(row.fence),
    lockedUntil: toMillis(row.locked_until),
    result: decodeResult(row.result, row.result_meta),
    error: (row.error as string | null) ?? null,
    stuckError: (row.stuck_error as string | null) ?? null,
    createdAt: toMillis(row.created_at)!,
    updatedAt: toMillis(row.updated_at)!,
    finishedAt: toMillis(row.finished_at),
  };
}

export function decodeStep(row: Record<string, unknown>): SagaStepRecord {
  return {
    position: Number(row.position),
    name: row.name as string,
    actionKey: row.action_key as string,
    compensationKey: (row.compensation_key as string | null) ?? null,
    state: row.state as SagaStepState,
    result: decodeResult(row.result, row.result_meta),
    compensationResult: decodeResult(row.compensation_result, row.compensation_result_meta),
    compensationAttempts: Number(row.compensation_attempts),
    registeredAt: toMillis(row.registered_at)!,
    doneAt: toMillis(row.done_at),
    compensatedAt: toMillis(row.compensated_at),
  };
}
