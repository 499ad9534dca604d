/**
 * The one retention sweeper of idem's tables: bounded batches, each one short autocommit statement
 * that skips locked rows (so live traffic never waits on the sweeper for long and two sweepers
 * never collide), optionally pinned to one tenant per batch, with one result shape and one set of
 * options for every table and for `idem sweep`.
 */
import type { Clock } from './clock.js';
import type { Queryable, QueryResult } from './sql.js';
import { affectedRows, defineStatement, type Statement } from './statement.js';
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

/** One batch of a sweep across every tenant: `$1` the cutoff, `$2` the batch size. */
export interface SweepBatch {
  cutoff: Date;
  limit: number;
}

/** One batch of a sweep pinned to one tenant: `$3` the tenant. */
export interface TenantSweepBatch extends SweepBatch {
  tenant: string;
}

/** How many rows a batch took, from the statement's result. */
export type SweepRows = (result: QueryResult) => number;

/**
 * A sweep's batch statement across every tenant ($1 cutoff, $2 batch size), answering how many
 * rows it took: its row count by default, or what `rows` reads (`deletedColumn`). Sent unnamed:
 * a sweep runs rarely, and a prepared statement would stay on every connection of the pool.
 */
export function sweepStatement(text: string, rows: SweepRows = affectedRows): Statement<SweepBatch, number> {
  return defineStatement({ text, params: (batch: SweepBatch) => [batch.cutoff, batch.limit], result: rows });
}

/** `sweepStatement` pinned to one tenant: $1 cutoff, $2 batch size, $3 tenant. */
export function tenantSweepStatement(
  text: string,
  rows: SweepRows = affectedRows,
): Statement<TenantSweepBatch, number> {
  return defineStatement({
    text,
    params: (batch: TenantSweepBatch) => [batch.cutoff, batch.limit, batch.tenant],
    result: rows,
  });
}

/** One statement a sweep runs in batches, and what its rows count as. */
export interface SweepPhase {
  /**
   * Across every tenant (`sweepStatement`). A text is taken as `sweepStatement(text, rowsOf)`,
   * for modules whose statements are still texts.
   */
  statement: Statement<SweepBatch, number> | string;
  /** One tenant (`tenantSweepStatement`); a text as for `statement`. */
  tenantStatement: Statement<TenantSweepBatch, number> | string;
  /** The cutoff each batch passes as $1 (read per batch, so a long sweep keeps up with time). */
  cutoff: () => Date;
  /** What its rows count as. Default `deleted`. */
  counts?: keyof SweepResult;
  /**
   * For a statement given as text: how many rows a batch took. Default its row count. A typed
   * statement answers the count itself.
   */
  rowsOf?: SweepRows;
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
      const { statement, tenantStatement } = phase;
      const across = typeof statement === 'string' ? sweepStatement(statement, phase.rowsOf) : statement;
      const pinned =
        typeof tenantStatement === 'string'
          ? tenantSweepStatement(tenantStatement, phase.rowsOf)
          : tenantStatement;
      for (let batch = 0; batch < maxBatches; batch++) {
        if (batch > 0 && pauseMs > 0) await clock.sleep(pauseMs);
        const cutoff = phase.cutoff();
        const rows =
          tenant === null
            ? await across(db, { cutoff, limit: batchSize })
            : await pinned(db, { cutoff, limit: batchSize, tenant });
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

/** How many rows a statement that answers `deleted` (a count) took, for `sweepStatement`. */
export const deletedColumn = (answer: { rows: Record<string, unknown>[] }): number =>
  Number(answer.rows[0]?.deleted ?? 0);
