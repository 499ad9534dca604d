/** The live counters: one statement, pushed to open pages every few seconds. */
import { readSnapshot, type IdemSnapshot } from '../../observability/snapshot.js';
import type { ConsoleDatabase } from '../database.js';

/**
 * What the console's cards show: idem's snapshot (observability/snapshot.ts), the same counts, by
 * the same definitions, as the Prometheus gauges and the outbox's `stats()`.
 */
export type ConsoleSummary = IdemSnapshot;

/**
 * Counts that matter to an operator, "now" on the console's clock. The outbox, receipts, tasks and
 * sagas counts read partial indexes of unfinished rows; the requests and inbox counts scan their
 * tables (see docs/operations/console.md for the measured cost and the partial indexes that would
 * make them cheap).
 */
export function readSummary(db: ConsoleDatabase): Promise<ConsoleSummary> {
  const now = db.clock.now();
  return db.read((tx) => readSnapshot(tx, db.s, now));
}
