/**
 * The one definition of what each module's counts mean: "backlog", "stuck", "dead", … for the
 * requests, intents, the outbox, the inbox, webhook receipts and deliveries, tasks and sagas. The
 * console's live summary, the Prometheus gauges (`idem/metrics`) and the outbox's `stats()` all
 * read it, so a number means the same thing on every screen, and time-based counts ("stuck": a
 * lease or a due time in the past) are measured on one clock, the one the caller passes (the
 * injected clock, never the database's `now()`).
 *
 * Each count is its own `SELECT count(*) … WHERE`, not one `count(*) FILTER` pass over the table:
 * the unfinished-row conditions match the tables' partial indexes, so a count reads the few
 * unfinished rows, never the finished millions (docs: operations, console, for the measured cost of
 * the two counts that still scan: requests and inbox).
 */
import type { Queryable } from '../core/sql.js';
import { defineStatement, firstRow, type Statement } from '../core/statement.js';

/**
 * One count of a module: a condition on its table (`$1` is "now", a `timestamptz`), or on another
 * table of the module.
 */
type Conditions = Record<string, string | { table: string; where: string }>;

interface ModuleDefinition {
  table: string;
  counts: Conditions;
  /** The age of the oldest row matching a condition, as `lagMs`. */
  oldest?: { column: string; where: string };
}

const unpublished = 'published_at IS NULL AND dead_at IS NULL';
const unfinishedReceipt = "state IN ('pending', 'processing')";
const runningSaga = "status IN ('running', 'compensating')";

/**
 * The definitions, by module. A condition may use `$1`, the snapshot's "now". Change a definition
 * here and every reader follows.
 */
const definitions = {
  requests: {
    table: 'requests',
    counts: {
      /** Keyed operations started and not finished (a multi-step operation between steps included). */
      pending: "state = 'pending'",
      /** Pending, and nobody holds it: its lease lapsed (or it never had one). */
      stuck: "state = 'pending' AND (locked_until IS NULL OR locked_until <= $1)",
    },
  },
  intents: {
    table: 'intents',
    counts: {
      /** Pending defined operations: running, or waiting for the completer. */
      waiting: 'true',
      /** Of those, the ones the completer already tried at least once. */
      retrying: 'attempts > 0',
    },
  },
  outbox: {
    table: 'outbox',
    counts: {
      /** Events not yet published and not dead. */
      backlog: unpublished,
      /** Of the backlog, the events due now. */
      due: `${unpublished} AND available_at <= $1`,
      /** Of the backlog, the events whose publish failed at least once. */
      retrying: `${unpublished} AND attempts > 0`,
      /** Of the backlog, the events held back for ever (available_at 'infinity'): an operator's. */
      parked: `${unpublished} AND available_at = 'infinity'`,
      /** Events parked as dead after their last attempt (and not published since). */
      dead: 'dead_at IS NOT NULL AND published_at IS NULL',
    },
    oldest: { column: 'created_at', where: unpublished },
  },
  inbox: {
    table: 'inbox',
    counts: {
      /** Messages recorded dead. */
      dead: "state = 'dead'",
    },
  },
  receipts: {
    table: 'webhook_receipts',
    counts: {
      /** Receipts pending or being processed. */
      backlog: unfinishedReceipt,
      /** Being processed, past their due time: the worker that claimed it is gone. */
      stuck: "state = 'processing' AND next_attempt_at <= $1",
      /** Waiting for their entity (busy, or an earlier sequence version missing). */
      waiting: "state = 'waiting'",
      /** Dead-lettered. */
      dead: "state = 'dead'",
      /** State events older than the applied version, recorded and never applied. */
      superseded: "state = 'superseded'",
      /** Sequence entities parked on a gap (a later version waited past the gap timeout). */
      parked: { table: 'webhook_entity_versions', where: 'parked_at IS NOT NULL' },
    },
    oldest: { column: 'received_at', where: unfinishedReceipt },
  },
  deliveries: {
    table: 'webhook_deliveries',
    counts: {
      /** Webhooks to send, or being sent. */
      pending: "state IN ('pending', 'delivering')",
      /** Webhooks whose last attempt failed for good. */
      failed: "state = 'failed'",
    },
  },
  tasks: {
    table: 'tasks',
    counts: {
      /** Tasks ready to be claimed. */
      ready: "state = 'ready'",
      /** Tasks claimed by a worker. */
      claimed: "state = 'claimed'",
      /** Claimed, and the claim's lease lapsed: the worker is gone. */
      stuck: "state = 'claimed' AND visible_at <= $1",
      /** Dead-lettered. */
      dead: "state = 'dead'",
    },
  },
  sagas: {
    table: 'sagas',
    counts: {
      /** Running or compensating. */
      running: runningSaga,
      /** A compensation could not finish: an operator's. */
      stuck: "status = 'stuck'",
      /** Running or compensating, and nobody holds it: its lease lapsed. */
      stalled: `${runningSaga} AND (locked_until IS NULL OR locked_until <= $1)`,
    },
  },
} satisfies Record<string, ModuleDefinition>;

type Definitions = typeof definitions;

/** A module's counts, and `lagMs` (the oldest unfinished row's age) where the module has one. */
export type ModuleSnapshot<D extends ModuleDefinition> = { [K in keyof D['counts']]: number } & (D extends {
  oldest: object;
}
  ? { lagMs: number | null }
  : unknown);

/** Every module's counts at one instant. */
export type IdemSnapshot = { at: string } & { [M in keyof Definitions]: ModuleSnapshot<Definitions[M]> };

/** The name of a module in the snapshot. */
export type SnapshotModule = keyof Definitions;

/**
 * Renders the statement that reads `modules` in one round trip. `filter`, a condition added to
 * every count (e.g. a tenant), may use parameters from `$2` on.
 */
export function snapshotStatement(
  schema: string,
  modules: readonly SnapshotModule[] = Object.keys(definitions) as SnapshotModule[],
  filter?: string,
): string {
  const columns: string[] = [];
  for (const module of modules) {
    const definition: ModuleDefinition = definitions[module];
    const table = `${schema}.${definition.table}`;
    const where = (condition: string) => (filter ? `(${condition}) AND (${filter})` : condition);
    for (const [name, count] of Object.entries(definition.counts)) {
      const [from, condition] =
        typeof count === 'string' ? [table, count] : [`${schema}.${count.table}`, count.where];
      columns.push(`(SELECT count(*) FROM ${from} WHERE ${where(condition)}) AS "${module}.${name}"`);
    }
    if (definition.oldest) {
      const { column, where: condition } = definition.oldest;
      columns.push(`(SELECT min(${column}) FROM ${table} WHERE ${where(condition)}) AS "${module}.oldest"`);
    }
  }
  // `$1::timestamptz` once, so a module whose counts never use "now" still types the parameter.
  return `SELECT $1::timestamptz AS "at",\n  ${columns.join(',\n  ')}`;
}

/** Reads the row `snapshotStatement` returns into per-module counts (`nowMs` for the lags). */
export function parseSnapshot<M extends SnapshotModule>(
  row: Record<string, unknown>,
  modules: readonly M[],
  nowMs: number,
): Pick<IdemSnapshot, M> {
  const result: Record<string, Record<string, number | null>> = {};
  for (const module of modules) {
    const definition: ModuleDefinition = definitions[module];
    const counts: Record<string, number | null> = {};
    for (const name of Object.keys(definition.counts)) counts[name] = Number(row[`${module}.${name}`] ?? 0);
    if (definition.oldest) counts.lagMs = ageMs(row[`${module}.oldest`], nowMs);
    result[module] = counts;
  }
  return result as Pick<IdemSnapshot, M>;
}

/** Every module's counts, read in one statement, "now" being `nowMs` (the caller's clock). */
export async function readSnapshot(db: Queryable, schema: string, nowMs: number): Promise<IdemSnapshot> {
  const row = await snapshotOf(schema)(db, { now: new Date(nowMs) });
  return { at: new Date(nowMs).toISOString(), ...parseSnapshot(row ?? {}, allModules, nowMs) };
}

const allModules = Object.keys(definitions) as SnapshotModule[];

/** The statement of every module's counts, per schema (a process reads one or two schemas). */
const snapshots = new Map<string, Statement<{ now: Date }, Record<string, unknown> | null>>();

function snapshotOf(schema: string): Statement<{ now: Date }, Record<string, unknown> | null> {
  let statement = snapshots.get(schema);
  if (!statement) {
    statement = defineStatement({
      text: snapshotStatement(schema, allModules),
      params: (at: { now: Date }) => [at.now],
      result: firstRow<Record<string, unknown>>,
    });
    snapshots.set(schema, statement);
  }
  return statement;
}

function ageMs(value: unknown, nowMs: number): number | null {
  // A timestamptz: a Date from node-postgres, a string from drivers that do not parse it.
  const at = value instanceof Date ? value.getTime() : typeof value === 'string' ? Date.parse(value) : NaN;
  return Number.isFinite(at) ? Math.max(0, nowMs - at) : null;
}
