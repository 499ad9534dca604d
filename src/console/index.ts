/**
 * The operator console: keyed requests, the outbox (with redrive), the inbox, webhook receipts and
 * deliveries, claims and sagas, with live counters. A Fastify plugin, served by the demo at
 * `/console` and by `idem console` against any database that holds idem's tables.
 *
 * @example
 * await app.register(consolePlugin, { pool, schema: 'idem', host: '127.0.0.1' });
 * // beyond loopback a token is required on every route:
 * await app.register(consolePlugin, { pool, host: '0.0.0.0', token: process.env.CONSOLE_TOKEN });
 */
import { fromPg } from '../adapters/pg.js';
import type { DemoOverrides } from '../demo/server.js';
import { consoleDefaults } from './options.js';
import { consolePlugin } from './plugin.js';

export { consolePlugin } from './plugin.js';
export { consoleDefaults, type ConsoleOptions } from './options.js';
export { isLoopback } from './access.js';
export type { ConsoleSummary } from './views/summary.js';
export type { RequestDetail, RequestList, RequestSummary } from './views/requests.js';
export type { OutboxView } from './views/outbox.js';
export type { InboxView } from './views/inbox.js';
export type { WebhooksView } from './views/webhooks.js';
export type { TasksView } from './views/tasks.js';
export type { SagasView } from './views/sagas.js';

/**
 * The console as one of the demo's plugins: mounted at `/console`, token from `CONSOLE_TOKEN`, on a
 * pool of its own (two connections, closed with the app), so no number of console pages can take
 * a connection a payment needs.
 */
export function demoConsole(): NonNullable<DemoOverrides['plugins']>[number] {
  return async (app, { databaseUrl, schema, config }) => {
    // Loaded here: the console itself needs no driver, the demo has node-postgres anyway.
    const { default: pg } = await import('pg');
    const pool = new pg.Pool({ connectionString: databaseUrl, max: consoleDefaults.maxConcurrentReads });
    pool.on('error', (error) => console.error(`console: database connection lost: ${error.message}`));
    app.addHook('onClose', async () => pool.end());
    // The demo's IDEM_PREPARE holds for the console's reads too (docs/deployment.md).
    const sql = fromPg(pool, { prepare: config.prepare });
    await app.register(consolePlugin, { sql, schema, host: config.host, token: config.consoleToken });
  };
}
