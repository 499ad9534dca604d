/**
 * The retention sweep of webhook receipts. It needs no handlers: `idem sweep` and a cron job run
 * it on the pool alone; `WebhookProcessor.sweep()` calls it too.
 */
import { systemClock, type Clock } from '../core/clock.js';
import type { Queryable } from '../core/sql.js';
import { sweepInBatches, type SweepOptions, type SweepResult } from '../core/sweeper.js';
import { defaultSchema } from '../core/schema-name.js';
import { renderReceiptStatements } from './statements.js';

/** Options of `sweepReceipts`. */
export interface ReceiptSweepOptions extends SweepOptions {
  /** Schema of idem's tables. Default `idem`. */
  schema?: string;
  /** Time that decides what is past its retention. Default: the system clock. */
  clock?: Clock;
}

/**
 * Deletes applied, superseded, duplicate and unhandled receipts past their retention (each
 * receipt's `expires_at`, set from its source's retention when stored), in bounded batches that
 * skip locked rows. Dead and waiting receipts are kept. Entity versions are kept: they stop a very
 * late replay from moving state backwards after its receipt is gone.
 */
export function sweepReceipts(db: Queryable, options: ReceiptSweepOptions = {}): Promise<SweepResult> {
  const { schema = defaultSchema, clock = systemClock, ...sweep } = options;
  const statements = renderReceiptStatements(schema);
  return sweepInBatches(
    db,
    clock,
    [
      {
        statement: statements.sweep,
        tenantStatement: statements.sweepTenant,
        cutoff: () => new Date(clock.now()),
      },
    ],
    sweep,
  );
}
