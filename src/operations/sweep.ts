import type { Clock } from '../core/clock.js';
import type { Queryable } from '../core/sql.js';
import { validateTenants } from '../core/tenant.js';
import type { Statements } from './statements.js';

/** Options of a sweep. */
export interface SweepOptions {
  /**
   * Rows per batch. Each batch is one short autocommit statement that skips locked rows, so live
   * traffic never waits on the sweeper for long and two sweepers never collide. Default 1000.
   */
  batchSize?: number;
  /** Stop after this many batches per phase; default: until nothing is due. */
  maxBatches?: number;
  /** Pause between batches, to leave room for live traffic. Default 0 ms. */
  pauseMs?: number;
  /**
   * Only these tenants' keys, each batch pinned to one tenant (a sweeper per shard or per cell).
   * Default: every tenant. `maxBatches` then counts per tenant and phase.
   */
  tenants?: readonly string[];
}

/** What a sweep did. */
export interface SweepResult {
  /** Finished keys whose stored result was cleared (their tombstone remains). */
  resultsCleared: number;
  /** Rows past their tombstone, deleted with their steps. */
  rowsDeleted: number;
}

/** Clears results past `expires_at`, then deletes rows past `tombstone_until`, in bounded batches. */
export async function sweep(
  db: Queryable,
  statements: Statements,
  clock: Clock,
  options: SweepOptions = {},
): Promise<SweepResult> {
  const batchSize = options.batchSize ?? 1000;
  const maxBatches = options.maxBatches ?? Infinity;
  const tenants = validateTenants(options.tenants);
  const result: SweepResult = { resultsCleared: 0, rowsDeleted: 0 };
  for (const tenant of tenants ?? [null]) {
    for (const [statement, field] of [
      [tenant === null ? statements.sweepBodies : statements.sweepBodiesTenant, 'resultsCleared'],
      [tenant === null ? statements.sweepRows : statements.sweepRowsTenant, 'rowsDeleted'],
    ] as const) {
      for (let batch = 0; batch < maxBatches; batch++) {
        const params = [new Date(clock.now()), batchSize, ...(tenant === null ? [] : [tenant])];
        const { rowCount } = await db.query(statement, params);
        result[field] += rowCount;
        if (rowCount < batchSize) break;
        if (options.pauseMs) await clock.sleep(options.pauseMs);
      }
    }
  }
  return result;
}
