import type { Clock } from '../core/clock.js';
import type { Queryable } from '../core/sql.js';
import { cutoffBefore, sweepInBatches, type SweepOptions, type SweepResult } from '../core/sweeper.js';
import type { SagaStatements } from './statements.js';

/**
 * Deletes sagas that finished (completed or compensated) more than `olderThanMs` ago, with their
 * steps, on the core sweeper. `Sagas.sweep` passes the engine's `retentionMs`; `idem sweep` a
 * retention chosen per run, without an engine.
 */
export function sweepSagas(
  db: Queryable,
  clock: Clock,
  statements: SagaStatements,
  olderThanMs: number,
  options: SweepOptions = {},
): Promise<SweepResult> {
  return sweepInBatches(
    db,
    clock,
    [
      {
        statement: statements.sweep,
        tenantStatement: statements.sweepTenant,
        cutoff: cutoffBefore(clock, olderThanMs),
      },
    ],
    options,
  );
}
