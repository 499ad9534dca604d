import type { FingerprintOptions } from '../core/fingerprint.js';
import type { StoreOptions } from '../core/store.js';

/** How `run`/`runIn` record a key; see `IdemOptions.recording`. */
export type Recording = 'commit' | 'claim';

/** Whether `run`/`runIn` read the key before executing; see `IdemOptions.readFirst`. */
export type ReadFirst = boolean | 'auto';

const hour = 3_600_000;
const day = 24 * hour;

/**
 * How long a key is remembered. Choose the longest of: client retry horizon, queue redrive,
 * webhook redelivery, operator replay, and settlement of money-moving work. A shorter window
 * turns a late retry into a second effect.
 */
export interface RetentionPolicy {
  /**
   * How long the stored result is replayed after completion. Default 7 days (Stripe keeps 24
   * hours; money-moving work usually needs days). Longer costs table space for result bodies.
   */
  resultMs: number;
  /**
   * How long the key's tombstone (fingerprint and resource pointer, no body) is kept after
   * completion. A retry inside it gets `ExpiredError` with the resource pointer instead of a
   * second effect; after it the key is new again. Default 30 days. Must be >= `resultMs`.
   */
  tombstoneMs: number;
}

export const defaultRetention: RetentionPolicy = { resultMs: 7 * day, tombstoneMs: 30 * day };

/** Options of `createIdem`. */
export interface IdemOptions<Client = unknown> extends StoreOptions<Client> {
  /**
   * Retention of every operation, or a function choosing one per operation name.
   * Default `{ resultMs: 7 days, tombstoneMs: 30 days }`.
   */
  retention?: Partial<RetentionPolicy> | ((operation: string) => Partial<RetentionPolicy>);
  /**
   * How long a concurrent duplicate waits for the first execution before `InProgressError`.
   * Default 5000 ms. Longer waits hold a connection; shorter ones push retries to the client.
   */
  waitMs?: number;
  /**
   * Lease of a multi-step operation's holder. A crashed holder's operation can be taken over after
   * this long. Every step renews it, and a running call's heartbeat renews it every
   * `heartbeatMs`, so a call may take longer than the lease. Default 30000 ms: a shorter lease
   * resumes a crashed operation sooner but costs more heartbeats.
   */
  leaseMs?: number;
  /**
   * While a multi-step operation's call to the outside world (`op.call`) runs, a background
   * heartbeat renews the lease this often, on `clock`; if a renewal finds that a retry took the
   * operation over, the call's `signal` is aborted. Default `leaseMs / 3` (10000 ms): two beats
   * may fail before the lease lapses. Must be less than `leaseMs`. Each beat is one short
   * statement on a pooled connection, never a transaction held across the call.
   */
  heartbeatMs?: number;
  /** Minimum key length, to refuse low-entropy keys. Default 1; the maximum is always 255. */
  minKeyLength?: number;
  /** Whole-transaction retries on serialization failure or deadlock (40001, 40P01). Default 3. */
  transactionRetries?: number;
  /**
   * How `run` and `runIn` record a key; `steps` always claims first. Default `'commit'`.
   *
   * `'commit'`: the handler runs first, and the completed record is inserted as the last statement
   * of its transaction (one statement where `'claim'` sends two). A concurrent duplicate runs its
   * handler too, then waits on the key's unique index until the first commits, finds the record
   * and answers it as a replay; its own writes roll back. A different request under the same key
   * rolls back and throws `KeyReusedError`; a handler that throws stores nothing. Whoever commits
   * first wins, and the others' writes never become visible. Safe when every effect of the
   * handler is a write in its transaction, which is `run`'s contract.
   *
   * `'claim'`: a pending record is inserted before the handler runs and completed after it. A
   * concurrent duplicate waits (up to `waitMs`) before its handler runs instead of running it and
   * rolling back. Choose it for handlers whose concurrent duplicates are expensive, or that do
   * something a rollback cannot undo (better still: `steps`).
   */
  recording?: Recording;
  /**
   * Whether `run`/`runIn` read the key before running the handler. The read answers a retry of a
   * finished key with no transaction and without running its handler; without it, a retry runs
   * the handler, whose writes roll back when the record is found at commit, and is answered the
   * same. The read costs one statement on every first execution (pgbench at c=32: 0.48–0.52× a
   * plain transaction with it, 0.61× without, for commit-time recording).
   *
   * `'auto'` (the default) reads while more than one call in ten of the operation recently found
   * its key already recorded, and skips the read where first executions dominate; it starts on,
   * so a fresh process answers its first retries without running their handlers. `true` always
   * reads; `false` never does. The HTTP integrations default to `'auto'` too.
   */
  readFirst?: ReadFirst;
}

/** Names one execution of an intent. */
export interface OperationSpec {
  /** Who the key belongs to, usually the authenticated account. Keys never cross tenants. */
  tenant: string;
  /** What is being done, e.g. `create-payment`. Keys never cross operations. */
  operation: string;
  /** The client's idempotency key: 1–255 printable ASCII characters. */
  key: string;
  /** The request to fingerprint. The same key with another fingerprint is refused. */
  request?: unknown;
  /** A precomputed fingerprint, or options for computing one from `request`. */
  fingerprint?: string | FingerprintOptions;
  /** Overrides the instance's retention for this call. */
  retention?: Partial<RetentionPolicy>;
  /** Overrides the instance's `waitMs` for this call. */
  waitMs?: number;
  /**
   * Overrides the instance's `transactionRetries` for this call (`run` only): e.g. 0 where the
   * caller retries on its own, as an HTTP client does. Default: the instance's (3).
   */
  transactionRetries?: number;
  /**
   * Overrides the instance's `recording` for this call (`run`/`runIn`): `'commit'` records the
   * completed key at the end of the handler's transaction, `'claim'` claims it before the handler.
   * Default: the instance's (`'commit'`). See `IdemOptions.recording` for the trade-off.
   */
  recording?: Recording;
  /**
   * Overrides the instance's `readFirst` for this call (`run`/`runIn`): `true`, `false` or
   * `'auto'`. Default: the instance's (`'auto'`). See `IdemOptions.readFirst`.
   */
  readFirst?: ReadFirst;
}

/** What a completer does with an operation that cannot complete. */
export type GiveUpAction = 'compensate' | 'fail';
