import type { FencedError } from '../core/errors.js';
import type { Queryable } from '../core/sql.js';

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
