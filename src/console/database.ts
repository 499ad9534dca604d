/** How the console reaches the database: every read in a read-only transaction with a timeout. */
import { fromPg } from '../adapters/pg.js';
import type { Clock } from '../core/clock.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { Queryable, Sql } from '../core/sql.js';
import { quoteSchema } from '../migrate/schema-name.js';
import type { ConsoleOptions } from './options.js';

export interface ConsoleDatabase {
  /** The pool or adapter, for the few writes (redrive). */
  sql: Sql;
  /** The schema name as given (for idem's own APIs). */
  schema: string;
  /** The validated, quoted schema for statement text. */
  s: string;
  clock: Clock;
  /**
   * Runs `fn` in a READ ONLY transaction with `statement_timeout`: the console's reads can neither
   * write by mistake nor hold a long scan on a busy database.
   */
  read<T>(fn: (db: Queryable) => Promise<T>): Promise<T>;
}

export function consoleDatabase(
  options: Pick<ConsoleOptions, 'pool' | 'sql' | 'schema'>,
  clock: Clock,
  statementTimeoutMs: number,
): ConsoleDatabase {
  const sql = options.sql ?? (options.pool ? fromPg(options.pool) : undefined);
  if (!sql) throw new InvalidArgumentError('the console needs `pool` or `sql`');
  const schema = options.schema ?? 'idem';
  const s = quoteSchema(schema);
  if (!(Number.isInteger(statementTimeoutMs) && statementTimeoutMs > 0)) {
    throw new InvalidArgumentError('statementTimeoutMs must be a positive integer');
  }
  const timeout = String(statementTimeoutMs);
  return {
    sql,
    schema,
    s,
    clock,
    read: (fn) =>
      sql.transaction(async (tx) => {
        await tx.query('SET TRANSACTION READ ONLY');
        await tx.query(`SELECT set_config('statement_timeout', $1, true)`, [timeout]);
        return fn(tx);
      }),
  };
}

const cellName = /^[A-Za-z0-9_.-]{1,100}$/;

/**
 * The console's databases by cell name: those of the `cells` option, or the one of `pool`/`sql`
 * under the name `''` (a console without cells).
 */
export function consoleCells(
  options: Pick<ConsoleOptions, 'pool' | 'sql' | 'schema' | 'cells'>,
  clock: Clock,
  statementTimeoutMs: number,
): Map<string, ConsoleDatabase> {
  if (options.cells === undefined) {
    return new Map([['', consoleDatabase(options, clock, statementTimeoutMs)]]);
  }
  if (options.pool !== undefined || options.sql !== undefined) {
    throw new InvalidArgumentError('give the console `cells`, or `pool`/`sql`, not both');
  }
  const entries = Object.entries(options.cells);
  if (entries.length === 0) throw new InvalidArgumentError('cells needs at least one cell');
  const cells = new Map<string, ConsoleDatabase>();
  for (const [name, db] of entries) {
    if (!cellName.test(name)) {
      throw new InvalidArgumentError(`cell name ${JSON.stringify(name)} must be 1–100 of A–Z a–z 0–9 _ . -`);
    }
    const source = 'transaction' in db ? { sql: db } : { pool: db };
    cells.set(name, consoleDatabase({ ...source, schema: options.schema }, clock, statementTimeoutMs));
  }
  return cells;
}

/** A timestamp column as ISO text, or null (infinity is null: "not scheduled"). */
export function iso(value: unknown): string | null {
  if (value === null || value === undefined || value === 'infinity' || value === Infinity) return null;
  const date = value instanceof Date ? value : new Date(value as string);
  return Number.isFinite(date.getTime()) ? date.toISOString() : null;
}

/** Milliseconds from `value` to `now` (positive for the past), or null. */
export function ageMs(value: unknown, now: number): number | null {
  const at = iso(value);
  return at === null ? null : now - Date.parse(at);
}

export const num = (value: unknown): number => Number(value ?? 0);
/** A column value as text (drivers return strings, numbers, bigints or Dates). */
export function text(value: unknown): string {
  switch (typeof value) {
    case 'string':
      return value;
    case 'number':
    case 'bigint':
    case 'boolean':
      return String(value);
    default:
      if (value instanceof Date) return value.toISOString();
      return JSON.stringify(value) ?? '';
  }
}

export const str = (value: unknown): string | null =>
  value === null || value === undefined ? null : text(value);
