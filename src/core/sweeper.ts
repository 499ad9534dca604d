/**
 * The one retention sweeper of idem's tables: bounded batches, each one short autocommit statement
 * that skips locked rows (so live traffic never waits on the sweeper for long and two sweepers
 * never collide), optionally pinned to one tenant per batch, with one result shape and one set of
 * options for every table and for `idem sweep`.
 */
import type { Clock } from './clock.js';
import type { Queryable } from './sql.js';
import { validateTenants } from './tenant.js';
import { nonNegative, positiveInteger } from './validate.js';

/** Options of every `sweep`. */
export interface SweepOptions {
  /** Rows per batch: one short statement each. Default 1000. */
  batchSize?: number;
  /**
   * Stop after this many batches per tenant and phase. Default: until nothing is due (a bound
   * would only hide a backlog; each batch is short and skips locked rows).
   */
  maxBatches?: number;
  /**
   * Pause between batches, in ms, to leave room for live traffic. Default 0. (`idem sweep` uses
   * 20: flat out, a sweep halved first-execution throughput beside it.)
   */
  pauseMs?: number;
  /**
   * Only these tenants' rows, each batch pinned to one tenant (a sweeper per shard or per cell).
   * Default: the module's own `tenants` when it has them, else every tenant.
   */
  tenants?: readonly string[];
}

/** Options of the sweeps whose retention is chosen when sweeping (published events, messages). */
export interface RetentionSweepOptions extends SweepOptions {
  /** Deletes what finished longer ago than this, in ms. Each module says its default. */
  olderThanMs?: number;
}

/** What a sweep did. Every table's sweep answers with this shape. */
export interface SweepResult {
  /** Rows deleted. */
  deleted: number;
  /** Rows kept but emptied (a key's stored result, its tombstone kept). 0 for most tables. */
  cleared: number;
}

/** One statement a sweep runs in batches, and what its rows count as. */
export interface SweepPhase {
  /** Across every tenant: $1 cutoff, $2 batch size. */
  statement: string;
  /** One tenant: $1 cutoff, $2 batch size, $3 tenant. */
  tenantStatement: string;
  /** The cutoff each batch passes as $1 (read per batch, so a long sweep keeps up with time). */
  cutoff: () => Date;
  /** What its rows count as. Default `deleted`. */
  counts?: keyof SweepResult;
  /** How many rows a batch took. Default its row count; a statement that returns a count reads it. */
  rowsOf?: (result: { rows: Record<string, unknown>[]; rowCount: number }) => number;
}

/** Runs `phases` in bounded batches, tenant by tenant when `tenants` is given. */
export async function sweepInBatches(
  db: Queryable,
  clock: Clock,
  phases: readonly SweepPhase[],
  options: SweepOptions = {},
): Promise<SweepResult> {
  const batchSize = positiveInteger('batchSize', options.batchSize ?? 1000);
  const maxBatches = options.maxBatches ?? Infinity;
  if (maxBatches !== Infinity) positiveInteger('maxBatches', maxBatches);
  const pauseMs = nonNegative('pauseMs', options.pauseMs ?? 0);
  const tenants = validateTenants(options.tenants);
  const result: SweepResult = { deleted: 0, cleared: 0 };
  for (const tenant of tenants ?? [null]) {
    for (const phase of phases) {
      for (let batch = 0; batch < maxBatches; batch++) {
        if (batch > 0 && pauseMs > 0) await clock.sleep(pauseMs);
        const params = [phase.cutoff(), batchSize];
        const answer =
          tenant === null
            ? await db.query(phase.statement, params)
            : await db.query(phase.tenantStatement, [...params, tenant]);
        const rows = phase.rowsOf ? phase.rowsOf(answer) : answer.rowCount;
        result[phase.counts ?? 'deleted'] += rows;
        if (rows < batchSize) break;
      }
    }
  }
  return result;
}

/** A cutoff `olderThanMs` before the clock's now, for `SweepPhase.cutoff`. */
export function cutoffBefore(clock: Clock, olderThanMs: number): () => Date {
  nonNegative('olderThanMs', olderThanMs);
  return () => new Date(clock.now() - olderThanMs);
}

/** A statement that answers `deleted` (a count), for `SweepPhase.rowsOf`. */
export const deletedColumn = (answer: { rows: Record<string, unknown>[] }): number =>
  Number(answer.rows[0]?.deleted ?? 0);
