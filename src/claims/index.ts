/**
 * idem/claims: tasks for polling workers and background agents. Enqueue with a dedupe key,
 * claim N with a lease (SKIP LOCKED), keep the lease with heartbeats, complete or fail with a
 * fencing token; failures retry with backoff, then go to the dead letters.
 */
export { Claims, createClaims } from './claims.js';
export type { ClaimOptions, FailOptions, FailResult, RunOutcome } from './claims.js';
export { claimDefaults, type ClaimsOptions, type EnqueueResult, type EnqueueSpec } from './options.js';
export { keepAlive, type KeepAlive, type KeepAliveOptions } from './keep-alive.js';
export {
  ClaimsWorker,
  createClaimsWorker,
  work,
  type ClaimsWorkerOptions,
  type WorkOptions,
} from './worker.js';
export { taskKey, taskScope, type ClaimedTask, type TaskRecord, type TaskState } from './task.js';
export {
  ConcurrentChangeError,
  FencedError,
  KeyReusedError,
  isConcurrentChange,
  isFenced,
  isKeyReused,
} from '../core/errors.js';
