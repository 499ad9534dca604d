import { InvalidArgumentError, type FencedError } from '../core/errors.js';
import type { Queryable } from '../core/sql.js';
import { positive } from '../core/validate.js';

/**
 * One holder's lease on one fenced record: a multi-step operation's `requests` row or a saga's
 * `sagas` row. The record carries a fencing counter that every takeover raises; the holder keeps
 * the value it claimed with, and every write it makes checks that value first.
 */
export interface FencedLease {
  /**
   * Inside `tx`: checks the fence, renews the lease, moves the record's recovery point to `point`
   * where it keeps one, and row-locks the record until `tx` ends, so a takeover waits for the
   * step's short transaction instead of racing it. Throws `FencedError` when the fence was raised.
   */
  hold(tx: Queryable, point: string): Promise<void>;
  /**
   * One statement on its own (autocommit, no transaction left open): checks the fence and renews
   * the lease. Resolves false when the fence was raised, i.e. another execution took over.
   */
  renew(): Promise<boolean>;
  /** The error a holder that lost its lease gets. */
  lost(): FencedError;
}

/** The default heartbeat: a third of the lease, so two beats may fail before it lapses. */
export function defaultHeartbeatMs(leaseMs: number): number {
  return Math.max(1, Math.floor(leaseMs / 3));
}

/** How long a holder's lease lasts and how often a call's heartbeat renews it. */
export interface LeaseTimings {
  leaseMs: number;
  heartbeatMs: number;
}

/**
 * The lease and heartbeat options of the modules that drive steps (`createIdem`, `createSagas`),
 * validated alike: both positive, the heartbeat (default a third of the lease) shorter than the
 * lease, or a beat could come after the lease it was to keep had lapsed.
 */
export function leaseTimings(options: Partial<LeaseTimings>, defaultLeaseMs: number): LeaseTimings {
  const leaseMs = positive('leaseMs', options.leaseMs ?? defaultLeaseMs);
  const heartbeatMs = positive('heartbeatMs', options.heartbeatMs ?? defaultHeartbeatMs(leaseMs));
  if (heartbeatMs >= leaseMs) throw new InvalidArgumentError('heartbeatMs must be less than leaseMs');
  return { leaseMs, heartbeatMs };
}
