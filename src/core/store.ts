/**
 * Where a module's tables live: the options every module that owns tables takes (`sql`, `schema`,
 * `clock`), resolved once with its statements rendered for the schema.
 */
import { systemClock, type Clock } from './clock.js';
import { createEvents, type IdemEvents } from './event-channel.js';
import { defaultSchema } from './schema-name.js';
import type { Sql } from './sql.js';

/** The options of every module that owns tables. */
export interface StoreOptions<Client = unknown> {
  /** Where the tables live and how transactions open: see `idem/pg`, `idem/postgres`, … */
  sql: Sql<Client>;
  /** Schema of idem's tables. Default `idem`. */
  schema?: string;
  /** Time for due times, leases, backoff and retention. Default: the system clock. */
  clock?: Clock;
  /**
   * Where the module reports what happened and the failures it survived (`createEvents()`; pass
   * one channel to every module of an application). Default: a channel of the module's own
   * (its `events`), with no listener until you add one: a survived failure is written to stderr,
   * one line.
   */
  events?: IdemEvents;
}

/** `StoreOptions` resolved, with the module's statements. */
export interface Store<Client, Statements> {
  sql: Sql<Client>;
  schema: string;
  clock: Clock;
  events: IdemEvents;
  statements: Statements;
}

/** Resolves `options` and renders the module's statements for its schema. */
export function openStore<Client, Statements>(
  options: StoreOptions<Client>,
  render: (schema: string) => Statements,
): Store<Client, Statements> {
  const schema = options.schema ?? defaultSchema;
  return {
    sql: options.sql,
    schema,
    clock: options.clock ?? systemClock,
    events: options.events ?? createEvents(),
    statements: render(schema),
  };
}

/**
 * A module that owns tables (the inbox, claims, the webhook processor and sender): where they
 * live, the clock, and the module's statements rendered for the schema.
 */
export abstract class TableModule<Client, Statements> {
  /** Where the tables live and how transactions open. */
  readonly sql: Sql<Client>;
  /** Schema of the tables. */
  readonly schema: string;
  /** Time of due times, leases, backoff and retention. */
  readonly clock: Clock;
  /** Where the module reports what happened and the failures it survived (`StoreOptions.events`). */
  readonly events: IdemEvents;
  protected readonly statements: Statements;

  protected constructor(options: StoreOptions<Client>, render: (schema: string) => Statements) {
    ({
      sql: this.sql,
      schema: this.schema,
      clock: this.clock,
      events: this.events,
      statements: this.statements,
    } = openStore(options, render));
  }
}
