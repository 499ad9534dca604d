/**
 * idem/claims: tasks for polling workers and background agents. Enqueue with a dedupe key,
 * claim N with a lease (SKIP LOCKED), keep the lease with heartbeats, complete or fail with a
 * fencing token; failures retry with backoff, then go to the dead letters.
 */
export { createClaims, type Claims } from './claims.js';
export type { RunOutcome } from './claims.js';
export type { ClaimOptions, FailOptions, FailResult } from './leases.js';
export { claimDefaults, type ClaimsOptions, type EnqueueResult, type EnqueueSpec } from './options.js';
export { createKeepAlive, type KeepAlive, type KeepAliveOptions } from './keep-alive.js';
export { createClaimsWorker, type ClaimsWorker, type ClaimsWorkerOptions } from './worker.js';
export { taskKey, taskScope, type ClaimedTask, type TaskRecord, type TaskState } from './task.js';
export type { RetentionSweepOptions, SweepOptions, SweepResult } from '../core/sweeper.js';
