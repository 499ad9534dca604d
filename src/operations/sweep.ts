import type { Clock } from '../core/clock.js';
import type { Queryable } from '../core/sql.js';
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
  const result: SweepResult = { resultsCleared: 0, rowsDeleted: 0 };
  for (const [statement, field] of [
    [statements.sweepBodies, 'resultsCleared'],
    [statements.sweepRows, 'rowsDeleted'],
  ] as const) {
    for (let batch = 0; batch < maxBatches; batch++) {
      const { rowCount } = await db.query(statement, [new Date(clock.now()), batchSize]);
      result[field] += rowCount;
      if (rowCount < batchSize) break;
      if (options.pauseMs) await clock.sleep(options.pauseMs);
    }
  }
  return result;
}
