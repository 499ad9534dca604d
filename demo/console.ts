/**
 * The operator console as one of the demo's plugins. It lives with the demo, not in `idem/console`:
 * the library serves the console (`consolePlugin`) and knows nothing of the demo.
 */
import { fromPg, pgConnectionDefaults } from '../src/adapters/pg.js';
import { consoleDefaults, consolePlugin } from '../src/console/index.js';
import type { DemoOverrides } from './server.js';

/**
 * The console mounted at `/console`, token from `CONSOLE_TOKEN`, on a pool of its own (two
 * connections, closed with the app), so no number of console pages can take a connection a
 * payment needs.
 */
export function demoConsole(): NonNullable<DemoOverrides['plugins']>[number] {
  return async (app, { databaseUrl, schema, config }) => {
    // Loaded here: the console itself needs no driver, the demo has node-postgres anyway.
    const { default: pg } = await import('pg');
    const pool = new pg.Pool({
      ...pgConnectionDefaults,
      connectionString: databaseUrl,
      max: consoleDefaults.maxConcurrentReads,
    });
    pool.on('error', (error) => console.error(`console: database connection lost: ${error.message}`));
    app.addHook('onClose', async () => pool.end());
    // The demo's IDEM_PREPARE holds for the console's reads too (docs/operations/deployment.md).
    const sql = fromPg(pool, { prepare: config.prepare });
    await app.register(consolePlugin, { sql, schema, host: config.host, token: config.consoleToken });
  };
}
