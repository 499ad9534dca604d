/**
 * The operator console: keyed requests, the outbox (with redrive), the inbox, webhook receipts and
 * deliveries, claims and sagas, with live counters, and each intent's timeline (`api/trace`). A Fastify plugin, served by `idem console`
 * (and by the repository's demo at `/console`) against any database that holds idem's tables.
 *
 * @example
 * await app.register(consolePlugin, { pool, schema: 'idem', host: '127.0.0.1' });
 * // beyond loopback a token is required on every route:
 * await app.register(consolePlugin, { pool, host: '0.0.0.0', token: process.env.CONSOLE_TOKEN });
 */
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
export type { ConsoleIntent } from './database.js';
