import type { Clock } from '../core/clock.js';
import type { BackoffOptions } from '../core/resilience/backoff.js';
import type { Sql } from '../core/sql.js';
import type { TaskRecord } from './task.js';

const day = 86_400_000;

/** Options of `createClaims`. */
export interface ClaimsOptions<Client = unknown> {
  /** Where the tables live and how transactions open. See `idem/pg`, `idem/postgres`, … */
  sql: Sql<Client>;
  /** Schema of idem's tables. Default `idem`. */
  schema?: string;
  /** Time source for leases and backoff. Default: the system clock. */
  clock?: Clock;
  /**
   * How long a claim holds a task before another worker may take it over. Heartbeats renew it.
   * Default 30000 ms. Shorter recovers crashed workers sooner but needs more frequent heartbeats.
   */
  leaseMs?: number;
  /**
   * Claims a task gets before it is dead-lettered. A lapsed lease counts as an attempt. Default 5.
   * Per task: `enqueue({ maxAttempts })`.
   */
  maxAttempts?: number;
  /**
   * Backoff of a retryable failure. Default `{ baseMs: 1000, maxMs: 300000, jitter: 'equal' }`:
   * attempt n waits a random time in [d/2, d] with d = min(1000 · 2^(n−1), 300000) ms.
   */
  backoff?: BackoffOptions;
  /**
   * How long a completed or dead task (and so its dedupe key) is kept before `sweep` deletes it.
   * Enqueueing the same key inside this window returns the finished task instead of a new one.
   * Default 30 days: choose at least your producers' replay horizon.
   */
  retentionMs?: number;
  /** Names this process in `locked_by`, for operators. Default: host name, pid and a random suffix. */
  workerId?: string;
}

export const claimDefaults = {
  leaseMs: 30_000,
  maxAttempts: 5,
  backoff: { strategy: 'exponential', baseMs: 1000, maxMs: 300_000, jitter: 'equal' } as BackoffOptions,
  retentionMs: 30 * day,
} as const;

/** What to enqueue. */
export interface EnqueueSpec<P = unknown> {
  /** Who the task belongs to. Dedupe keys never cross tenants. */
  tenant: string;
  /** The queue (the kind of work). Dedupe keys never cross queues. */
  queue: string;
  /** Names the intent, e.g. `notify:order-123`. The same key returns the existing task. */
  key: string;
  /** JSON-serialisable payload. The same key with a different payload is refused (`KeyReusedError`). */
  payload: P;
  /** Earliest time it may be claimed (epoch ms). Default: now. */
  runAt?: number;
  /** Overrides the instance's `maxAttempts`. */
  maxAttempts?: number;
}

/** What `enqueue` returns. */
export interface EnqueueResult<P> {
  task: TaskRecord<P>;
  /** False when the key already existed and the existing task was returned. */
  created: boolean;
}
