/** Connects the CLI to DATABASE_URL, or to an embedded PostgreSQL when it is unset and allowed. */
import pg from 'pg';
import { fromPg } from '../adapters/pg.js';
import type { Sql } from '../core/sql.js';
import { booleanSetting } from '../demo/config.js';
import { startEmbeddedPostgres } from '../embedded/embedded-postgres.js';

export interface CliDatabase {
  url: string;
  pool: pg.Pool;
  sql: Sql<pg.PoolClient>;
  embedded: boolean;
  close(): Promise<void>;
}

export async function openDatabase(
  options: { allowEmbedded?: boolean; poolSize?: number } = {},
): Promise<CliDatabase> {
  // IDEM_PREPARE=false behind a pooler that does not keep prepared statements (docs/deployment.md).
  const prepare = booleanSetting('IDEM_PREPARE', process.env.IDEM_PREPARE, true);
  let url = process.env.DATABASE_URL;
  let stopEmbedded: (() => Promise<void>) | undefined;
  if (!url) {
    if (!options.allowEmbedded) throw new Error('DATABASE_URL is not set');
    console.error('DATABASE_URL is not set: starting an embedded PostgreSQL (data under .idem/postgres)');
    const embedded = await startEmbeddedPostgres();
    url = embedded.url;
    stopEmbedded = () => embedded.stop();
  }
  const pool = new pg.Pool({ connectionString: url, max: options.poolSize ?? 10 });
  // An idle connection that the server closes (restart, shutdown) must not crash the process;
  // the pool replaces it on next use.
  pool.on('error', (error) => console.error(`database connection lost: ${error.message}`));
  return {
    url,
    pool,
    sql: fromPg(pool, { prepare }),
    embedded: stopEmbedded !== undefined,
    async close() {
      await pool.end();
      await stopEmbedded?.();
    },
  };
}
