import type { PgPoolLike } from '../adapters/pg.js';
import type { Clock } from '../core/clock.js';
import type { Sql } from '../core/sql.js';

/** Options of `consolePlugin`. Give `pool` or `sql`. */
export interface ConsoleOptions {
  /** A node-postgres pool on the database that holds idem's tables. */
  pool?: PgPoolLike;
  /** Any adapter's `Sql` (used when `pool` is not given). Reads run in read-only transactions. */
  sql?: Sql;
  /**
   * Several databases by cell name (one idem per group of tenants, see `createCells` and its
   * `sqls`), instead of `pool` or `sql`. The page gets a cell selector and every API route takes
   * `?cell=<name>` (default: the first cell); an unknown cell is a 400. Each cell is read on its own
   * database only. Default: none (one database).
   */
  cells?: Readonly<Record<string, Sql | PgPoolLike>>;
  /** Schema of idem's tables. Default `idem`. Validated like every schema name (`quoteSchema`). */
  schema?: string;
  /**
   * The address the server is (or will be) bound to. Default `127.0.0.1`. Anything but a loopback
   * address (127.0.0.0/8, ::1, localhost) makes every console route require `token`, and the
   * plugin refuses to register without one. Whatever this says, each request also checks the
   * address the server actually listens on.
   */
  host?: string;
  /**
   * The operator's token (e.g. `CONSOLE_TOKEN`), at least 16 characters. When set it is required on
   * every route, loopback or not: `Authorization: Bearer <token>`, or `?token=<token>` once, which
   * sets an HttpOnly, SameSite=Strict cookie. Default: none (loopback only).
   */
  token?: string;
  /** Where the console is mounted. Default `/console`. */
  basePath?: string;
  /** Time for ages, leases and "stuck". Default: the system clock (the one idem's writers use). */
  clock?: Clock;
  /** How often live counters are pushed to open pages, in ms. Default 2000. */
  liveIntervalMs?: number;
  /**
   * Per-statement timeout of the console's reads, in ms. Default 5000: an operator's page can
   * never hold a long scan on a busy database.
   */
  statementTimeoutMs?: number;
}

export const consoleDefaults = {
  schema: 'idem',
  host: '127.0.0.1',
  basePath: '/console',
  liveIntervalMs: 2000,
  statementTimeoutMs: 5000,
  minTokenLength: 16,
} as const;
