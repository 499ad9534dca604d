/** Connects the CLI to DATABASE_URL, or to an embedded PostgreSQL when it is unset and allowed. */
import pg from 'pg';
import { fromPg, pgConnectionDefaults } from '../adapters/pg.js';
import { createEvents } from '../core/event-channel.js';
import type { Sql } from '../core/sql.js';
import { booleanSetting } from './settings.js';
import { startEmbeddedPostgres } from '../embedded/embedded-postgres.js';
import { migrations } from '../migrate/migrate.js';
import { quoteSchema } from '../core/schema-name.js';
import { CliError, missingTables } from './errors.js';

export interface CliDatabase {
  url: string;
  pool: pg.Pool;
  sql: Sql<pg.PoolClient>;
  embedded: boolean;
  close(): Promise<void>;
}

export async function openDatabase(
  options: {
    allowEmbedded?: boolean;
    poolSize?: number;
    /** No statement bound: `migrate` runs DDL that may take long (an index on a large table). */
    longStatements?: boolean;
  } = {},
): Promise<CliDatabase> {
  // IDEM_PREPARE=false behind a pooler that does not keep prepared statements (docs/operations/deployment.md).
  const prepare = booleanSetting('IDEM_PREPARE', process.env.IDEM_PREPARE, true);
  let url = process.env.DATABASE_URL;
  let stopEmbedded: (() => Promise<void>) | undefined;
  if (url) {
    checkDatabaseUrl(url);
  } else {
    if (!options.allowEmbedded) {
      throw new CliError(
        'DATABASE_URL is not set: set it to your PostgreSQL (postgres://user:password@host:5432/database)',
      );
    }
    const embedded = await startEmbeddedPostgres();
    console.error('DATABASE_URL is not set: using an embedded PostgreSQL (data under .idem/postgres)');
    url = embedded.url;
    stopEmbedded = () => embedded.stop();
  }
  // Without timeouts, a host that drops packets would leave the command hanging for minutes.
  const pool = new pg.Pool({
    ...pgConnectionDefaults,
    ...(options.longStatements ? { query_timeout: 0 } : {}),
    connectionString: url,
    max: options.poolSize ?? 10,
    connectionTimeoutMillis: 10_000,
  });
  // An idle connection that the server closes (restart, shutdown) must not crash the process;
  // the pool replaces it on next use.
  pool.on('error', (error) => console.error(`database connection lost: ${error.message}`));
  const close = async () => {
    await pool.end();
    await stopEmbedded?.();
  };
  try {
    await pool.query('SELECT 1'); // fail here, with the connection's own error, not mid-command
  } catch (error) {
    await close();
    throw error;
  }
  // What the adapter survives (named statements refused behind a transaction-mode pooler, and
  // turned off): one warning that says which setting avoids it.
  const events = createEvents();
  events.on('error', ({ error }) =>
    console.warn(`idem: named prepared statements turned off for this pool: ${(error as Error).message}`),
  );
  return { url, pool, sql: fromPg(pool, { prepare, events }), embedded: stopEmbedded !== undefined, close };
}

/** Refuses a DATABASE_URL that is not a PostgreSQL connection string, before anything connects. */
export function checkDatabaseUrl(url: string): void {
  let protocol: string;
  try {
    protocol = new URL(url).protocol;
  } catch {
    protocol = '';
  }
  // pg also accepts a socket folder (`/var/run/postgresql dbname`).
  if (!['postgres:', 'postgresql:', 'socket:'].includes(protocol) && !url.startsWith('/')) {
    throw new CliError(
      `DATABASE_URL is not a valid postgres URL: '${redact(url)}' (expected postgres://user:password@host:5432/database)`,
    );
  }
}

/** Refuses to go on unless `schema` holds every idem migration: one line saying to migrate. */
export async function checkMigrated(db: CliDatabase, schema: string): Promise<void> {
  let applied: Set<number>;
  try {
    const { rows } = await db.pool.query<{ version: number }>(
      `SELECT version FROM ${quoteSchema(schema)}.migrations`,
    );
    applied = new Set(rows.map((r) => r.version));
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === '42P01' || code === '3F000') throw new CliError(missingTables(schema), { cause: error });
    throw error;
  }
  const missing = migrations(schema).filter((m) => !applied.has(m.version));
  if (missing.length === applied.size + missing.length) throw new CliError(missingTables(schema));
  if (missing.length > 0) {
    throw new CliError(
      `schema ${schema} lacks idem migrations ${missing.map((m) => m.name).join(', ')}: run idem migrate${schema === 'idem' ? '' : ` --schema ${schema}`}`,
    );
  }
}

/** The URL with its password hidden. */
function redact(url: string): string {
  return url.replace(/(\/\/[^:/@]*:)[^@]*@/, '$1***@');
}
