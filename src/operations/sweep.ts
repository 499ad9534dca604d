import type { Clock } from '../core/clock.js';
import type { Queryable } from '../core/sql.js';
import { sweepInBatches, type SweepOptions, type SweepResult } from '../core/sweeper.js';
import type { RequestStatements } from './statements.js';

export type { SweepOptions, SweepResult } from '../core/sweeper.js';

/**
 * Clears results past `expires_at` (`cleared`: the tombstone stays), then deletes rows past
 * `tombstone_until` with their steps (`deleted`), on the core sweeper.
 */
export function sweep(
  db: Queryable,
  statements: RequestStatements,
  clock: Clock,
  options: SweepOptions = {},
): Promise<SweepResult> {
  // Both phases compare with now: each row carries its own retention (`expires_at`, `tombstone_until`).
  const now = () => new Date(clock.now());
  const { bodies, bodiesTenant, rows, rowsTenant } = statements.sweep;
  return sweepInBatches(
    db,
    clock,
    [
      { statement: bodies, tenantStatement: bodiesTenant, cutoff: now, counts: 'cleared' },
      { statement: rows, tenantStatement: rowsTenant, cutoff: now },
    ],
    options,
  );
}
