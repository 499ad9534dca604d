/**
 * How the console reaches the database: every read in a read-only transaction with a timeout, and
 * at most `maxConcurrent` statements at once, so an operator's page (or a script hammering the
 * API) never holds more than that many connections, even on a pool it shares with the application.
 */
import { fromPg } from '../adapters/pg.js';
import type { Clock } from '../core/clock.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { Queryable, Sql } from '../core/sql.js';
import { parseIntentRef } from '../core/causation.js';
import { quoteSchema } from '../core/schema-name.js';
import type { ConsoleOptions } from './options.js';
import { limit, type Query } from './params.js';
import { renderInboxStatements } from './statements/inbox.js';
import { renderOutboxStatements } from './statements/outbox.js';
import { renderRequestStatements } from './statements/requests.js';
import { renderSagaStatements } from './statements/sagas.js';
import { readOnly, statementTimeout } from './statements/session.js';
import { renderTaskStatements } from './statements/tasks.js';
import { renderWebhookStatements } from './statements/webhooks.js';

/** Every view's statements, rendered once per console database (they name its schema). */
export function renderConsoleStatements(schema: string) {
  return {
    requests: renderRequestStatements(schema),
    outbox: renderOutboxStatements(schema),
    inbox: renderInboxStatements(schema),
    webhooks: renderWebhookStatements(schema),
    tasks: renderTaskStatements(schema),
    sagas: renderSagaStatements(schema),
  };
}

/** The console's statements, by view. */
export type ConsoleStatements = ReturnType<typeof renderConsoleStatements>;

export interface ConsoleDatabase {
  /** The pool or adapter, for the few writes (redrive). */
  sql: Sql;
  /** The schema name as given (for idem's own APIs). */
  schema: string;
  /** The validated, quoted schema, for the snapshot's statement text (the views' are in `statements`). */
  s: string;
  /** The views' statements in this schema. */
  statements: ConsoleStatements;
  clock: Clock;
  /**
   * Runs `fn` in a READ ONLY transaction with `statement_timeout`: the console's reads can neither
   * write by mistake nor hold a long scan on a busy database.
   */
  read<T>(fn: (db: Queryable) => Promise<T>): Promise<T>;
  /** Runs `fn` (which uses `sql`) within the console's concurrency limit: for the few writes. */
  write<T>(fn: () => Promise<T>): Promise<T>;
}

/** The console's database work is over its limit and its queue is full: answered 503. */
export class ConsoleBusyError extends Error {
  readonly code = 'IDEM_CONSOLE_BUSY';
  constructor(queued: number) {
    super(`the console already has ${queued} reads waiting for the database; retry shortly`);
  }
}

/** Reads that may wait for a turn before the console answers 503 instead. */
export const maxQueuedReads = 100;

/** At most `max` functions running at once; up to `maxQueued` more wait in order; past that, refused. */
export function concurrencyLimit(max: number, maxQueued: number) {
  let running = 0;
  const waiting: (() => void)[] = [];
  return async <T>(fn: () => Promise<T>): Promise<T> => {
    if (running >= max) {
      if (waiting.length >= maxQueued) throw new ConsoleBusyError(waiting.length);
      await new Promise<void>((resolve) => waiting.push(resolve));
    } else running++;
    try {
      return await fn();
    } finally {
      // Hand the slot straight to the next in line, or give it back.
      const next = waiting.shift();
      if (next) next();
      else running--;
    }
  };
}

export function consoleDatabase(
  options: Pick<ConsoleOptions, 'pool' | 'sql' | 'schema'>,
  clock: Clock,
  statementTimeoutMs: number,
  maxConcurrent = 2,
): ConsoleDatabase {
  const sql = options.sql ?? (options.pool ? fromPg(options.pool) : undefined);
  if (!sql) throw new InvalidArgumentError('the console needs `pool` or `sql`');
  const schema = options.schema ?? 'idem';
  const s = quoteSchema(schema);
  if (!(Number.isInteger(statementTimeoutMs) && statementTimeoutMs > 0)) {
    throw new InvalidArgumentError('statementTimeoutMs must be a positive integer');
  }
  if (!(Number.isInteger(maxConcurrent) && maxConcurrent > 0)) {
    throw new InvalidArgumentError('maxConcurrentReads must be a positive integer');
  }
  const statements = renderConsoleStatements(schema);
  const limited = concurrencyLimit(maxConcurrent, maxQueuedReads);
  return {
    sql,
    schema,
    s,
    statements,
    clock,
    read: (fn) =>
      limited(() =>
        sql.transaction(async (tx) => {
          await readOnly(tx);
          await statementTimeout(tx, { ms: statementTimeoutMs });
          return fn(tx);
        }),
      ),
    write: (fn) => limited(fn),
  };
}

const cellName = /^[A-Za-z0-9_.-]{1,100}$/;

/**
 * The console's databases by cell name: those of the `cells` option, or the one of `pool`/`sql`
 * under the name `''` (a console without cells). Each cell reads with its own `maxConcurrent`.
 */
export function consoleCells(
  options: Pick<ConsoleOptions, 'pool' | 'sql' | 'schema' | 'cells'>,
  clock: Clock,
  statementTimeoutMs: number,
  maxConcurrent?: number,
): Map<string, ConsoleDatabase> {
  if (options.cells === undefined) {
    return new Map([['', consoleDatabase(options, clock, statementTimeoutMs, maxConcurrent)]]);
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
    cells.set(
      name,
      consoleDatabase({ ...source, schema: options.schema }, clock, statementTimeoutMs, maxConcurrent),
    );
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

/**
 * One page of a view, read in one `db.read` transaction: `max` rows per list (the `limit`
 * parameter, checked before anything is read) as of `now` on the console's clock.
 */
export function readPage<T>(
  db: ConsoleDatabase,
  query: Query,
  fn: (tx: Queryable, page: { max: number; now: number }) => Promise<T>,
): Promise<T> {
  const max = limit(query);
  const now = db.clock.now();
  return db.read((tx) => fn(tx, { max, now }));
}

/** An intent by its names: what `api/trace?tenant=…&operation=…&key=…` takes. */
export interface ConsoleIntent {
  tenant: string;
  operation: string;
  key: string;
}

/**
 * The intent a record was written on behalf of (its `intent` column, migration 0011), by its
 * names: what the page links to `#/trace`. Null when the record names none.
 */
export function intentOf(value: unknown): ConsoleIntent | null {
  return typeof value === 'string' ? parseIntentRef(value) : null;
}
