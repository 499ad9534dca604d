import { toMillis } from '../core/clock.js';
import type { OperationScope } from '../core/errors.js';
import { deriveKey } from '../core/keys.js';

/** Where a task is in its life. */
export type TaskState = 'ready' | 'claimed' | 'completed' | 'dead';

/** A task as stored. */
export interface TaskRecord<P = unknown> {
  /** The task's id (a bigint, as a decimal string). */
  id: string;
  tenant: string;
  queue: string;
  /** The dedupe key it was enqueued with: the intent it names. */
  dedupeKey: string;
  payload: P;
  state: TaskState;
  /** For a ready task, when it becomes due; for a claimed one, when its lease ends (epoch ms). */
  visibleAt: number;
  /** The fencing token of the latest claim. */
  fence: number;
  attempts: number;
  maxAttempts: number;
  lastError: string | null;
  /** The completion's result, parsed from JSON. */
  result: unknown;
  createdAt: number;
  finishedAt: number | null;
  /**
   * The idempotency key to send downstream for this task's external calls: derived from
   * (tenant, queue, dedupe key), so it is the same for every worker, attempt and takeover.
   */
  key: string;
}

/** A task this worker holds. Every write about it carries `fence`. */
export interface ClaimedTask<P = unknown> extends TaskRecord<P> {
  state: 'claimed';
  /** When this holder's lease ends, as last renewed (epoch ms). */
  leaseUntil: number;
  /** The worker id that claimed it. */
  workerId: string;
}

export function taskScope(task: Pick<TaskRecord, 'tenant' | 'queue' | 'dedupeKey'>): OperationScope {
  return { tenant: task.tenant, operation: task.queue, key: task.dedupeKey };
}

/** The downstream key of a task; `path` names a sub-call when the task makes several. */
export function taskKey(task: Pick<TaskRecord, 'tenant' | 'queue' | 'dedupeKey'>, ...path: string[]): string {
  return deriveKey(taskScope(task), 'task', ...path);
}

export function decodeTask<P>(row: Record<string, unknown>): TaskRecord<P> {
  const base = {
    id: String(row.id),
    tenant: row.tenant_id as string,
    queue: row.queue as string,
    dedupeKey: row.dedupe_key as string,
  };
  return {
    ...base,
    payload: JSON.parse(row.payload as string) as P,
    state: row.state as TaskState,
    visibleAt: toMillis(row.visible_at)!,
    fence: Number(row.fence),
    attempts: Number(row.attempts),
    maxAttempts: Number(row.max_attempts),
    lastError: (row.last_error as string | null) ?? null,
    result:
      row.result === null || row.result === undefined ? null : (JSON.parse(row.result as string) as unknown),
    createdAt: toMillis(row.created_at)!,
    finishedAt: toMillis(row.finished_at),
    key: taskKey(base),
  };
}
