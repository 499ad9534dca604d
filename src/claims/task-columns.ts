/** The columns and row shapes of tasks, shared by statements.ts and enqueue-statements.ts. */
import type { Causation } from '../core/causation.js';
import type { TaskRecord } from './task.js';

/** The columns a claimed task is read with, in the order `decodeTask` expects. */
export const taskColumns = `id, tenant_id, queue, dedupe_key, payload, state, visible_at, fence, attempts,
  max_attempts, last_error, result, created_at, finished_at, intent, traceparent`;

/** A task row (`taskColumns`), decoded by `decodeTask`. */
export type TaskRow = Record<string, unknown>;

/** A task row with its key's fingerprint, as `enqueue` and `existing` read it. */
export type KeyedTaskRow = TaskRow & { fingerprint: string };

/** Names a task by its dedupe key. */
export type TaskKey = Pick<TaskRecord, 'tenant' | 'queue' | 'key'>;

/** A task to insert: its key, the payload's fingerprint and JSON text, when it is due, its attempts, its cause. */
export interface NewTask extends TaskKey, Causation {
  fingerprint: string;
  payload: string;
  visibleAt: Date;
  maxAttempts: number;
}
