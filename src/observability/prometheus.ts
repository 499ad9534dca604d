/**
 * Prometheus metrics for idem, with prom-client. Counters come from events (operations, webhook
 * rejections, inbox duplicates); gauges are read from idem's tables when Prometheus scrapes, in one
 * statement, so they are right across every process that shares the database.
 *
 * @example
 * const metrics = createIdemMetrics({ sql, schema: 'idem' });
 * const idem = createIdem({ sql, onEvent: metrics.onOperation });
 * app.get('/metrics', async (_req, reply) => reply.type(metrics.contentType).send(await metrics.render()));
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Queryable } from '../core/sql.js';
import { defaultSchema, quoteSchema } from '../core/schema-name.js';
import type { OperationEvent } from './events.js';

export interface IdemMetricsOptions {
  /** Where the backlog gauges are read from. Without it, only event counters are exported. */
  sql?: Queryable;
  /** Schema of idem's tables. Default `idem`. */
  schema?: string;
  /** Registry to register on. Default: a new one (use `render()`), so several instances never clash. */
  registry?: Registry;
  /** Metric name prefix. Default `idem_`. */
  prefix?: string;
}

export interface IdemMetrics {
  registry: Registry;
  contentType: string;
  /** Pass as `createIdem({ onEvent })`. */
  onOperation(event: OperationEvent): void;
  /** Count a refused webhook delivery by reason (`signature`, `timestamp`, `malformed`, `too-large`). */
  webhookRejected(reason: string): void;
  /** Count a duplicate message acknowledged by an inbox without running its handler. */
  inboxDuplicate(consumer: string): void;
  /** Pass as `createCompleter({ onCompletion })`: counts what the completer did, by operation. */
  completion(completion: { scope: { operation: string }; kind: string }): void;
  render(): Promise<string>;
}

/**
 * Creates the metrics, registered on `registry` (default a new one). See the module's example.
 *
 * @example
 * const metrics = createIdemMetrics({ sql, schema: 'idem' });
 * const idem = createIdem({ sql, onEvent: (event) => metrics.onOperation(event) });
 */
export function createIdemMetrics(options: IdemMetricsOptions = {}): IdemMetrics {
  const registry = options.registry ?? new Registry();
  const prefix = options.prefix ?? 'idem_';
  const schema = quoteSchema(options.schema ?? defaultSchema);

  const operations = new Counter({
    name: `${prefix}operations_total`,
    help: 'Keyed operation calls by outcome: executed, refused, replayed, key-reused (conflict), in-progress, expired, fenced, failed',
    labelNames: ['operation', 'outcome'],
    registers: [registry],
  });
  const duration = new Histogram({
    name: `${prefix}operation_duration_seconds`,
    help: 'Duration of keyed operation calls',
    labelNames: ['operation', 'outcome'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  });
  const webhookRejections = new Counter({
    name: `${prefix}webhook_rejections_total`,
    help: 'Webhook deliveries refused before anything was stored, by reason',
    labelNames: ['reason'],
    registers: [registry],
  });
  const inboxDuplicates = new Counter({
    name: `${prefix}inbox_duplicates_total`,
    help: 'Messages acknowledged as duplicates by an inbox, without running the handler',
    labelNames: ['consumer'],
    registers: [registry],
  });

  const completions = new Counter({
    name: `${prefix}completions_total`,
    help: 'Abandoned defined operations the completer took: completed, compensated, failed, retrying, skipped',
    labelNames: ['operation', 'outcome'],
    registers: [registry],
  });

  if (options.sql) {
    const sql = options.sql;
    // One round trip per scrape for every gauge; each count uses a partial index of its table.
    const snapshot = async () => {
      const { rows } = await sql.query<Record<string, string | number | null>>(`SELECT
        (SELECT count(*) FROM ${schema}.outbox WHERE published_at IS NULL AND dead_at IS NULL) AS outbox_backlog,
        (SELECT extract(epoch FROM now() - min(created_at)) FROM ${schema}.outbox WHERE published_at IS NULL AND dead_at IS NULL) AS outbox_lag,
        (SELECT count(*) FROM ${schema}.outbox WHERE dead_at IS NOT NULL AND published_at IS NULL) AS outbox_dead,
        (SELECT count(*) FROM ${schema}.inbox WHERE state = 'dead') AS inbox_dead,
        (SELECT count(*) FROM ${schema}.webhook_receipts WHERE state IN ('pending', 'processing')) AS receipts_backlog,
        (SELECT count(*) FROM ${schema}.webhook_receipts WHERE state = 'dead') AS receipts_dead,
        (SELECT count(*) FROM ${schema}.webhook_receipts WHERE state = 'superseded') AS receipts_superseded,
        (SELECT count(*) FROM ${schema}.webhook_receipts WHERE state = 'waiting') AS receipts_waiting,
        (SELECT count(*) FROM ${schema}.webhook_entity_versions WHERE parked_at IS NOT NULL) AS entities_parked,
        (SELECT count(*) FROM ${schema}.tasks WHERE state = 'dead') AS tasks_dead,
        (SELECT count(*) FROM ${schema}.requests WHERE state = 'pending' AND locked_until < now()) AS requests_stuck,
        (SELECT count(*) FROM ${schema}.intents) AS intents_waiting,
        (SELECT count(*) FROM ${schema}.intents WHERE attempts > 0) AS intents_retrying`);
      return rows[0] ?? {};
    };
    let pending: Promise<Record<string, string | number | null>> | undefined;
    // Every gauge of one scrape shares one snapshot.
    const shared = () => {
      pending ??= snapshot().finally(() => setTimeout(() => (pending = undefined), 100));
      return pending;
    };
    const gauge = (name: string, help: string, column: string) =>
      new Gauge({
        name: `${prefix}${name}`,
        help,
        registers: [registry],
        async collect() {
          const value = (await shared())[column];
          this.set(value === null || value === undefined ? 0 : Number(value));
        },
      });
    gauge('outbox_backlog', 'Outbox events not yet published (excluding dead)', 'outbox_backlog');
    gauge('outbox_lag_seconds', 'Age of the oldest unpublished outbox event', 'outbox_lag');
    gauge('outbox_dead', 'Outbox events parked as dead after their last attempt', 'outbox_dead');
    gauge('inbox_dead', 'Inbox messages recorded as dead', 'inbox_dead');
    gauge('webhook_receipts_backlog', 'Webhook receipts pending or being processed', 'receipts_backlog');
    gauge('webhook_receipts_dead', 'Webhook receipts dead-lettered', 'receipts_dead');
    gauge(
      'webhook_receipts_superseded',
      'Webhook receipts recorded as superseded (state events older than the applied version)',
      'receipts_superseded',
    );
    gauge(
      'webhook_receipts_waiting',
      'Webhook receipts waiting for their entity (busy, or an earlier sequence version missing)',
      'receipts_waiting',
    );
    gauge(
      'webhook_entities_parked',
      'Sequence entities parked on a gap: a later version waited past the gap timeout for a missing one',
      'entities_parked',
    );
    gauge('tasks_dead', 'Claimed tasks dead-lettered', 'tasks_dead');
    gauge('requests_stuck', 'Pending multi-step operations whose lease has lapsed', 'requests_stuck');
    gauge(
      'intents_waiting',
      'Pending defined operations (idem.define): running, or waiting for the completer',
      'intents_waiting',
    );
    gauge(
      'intents_retrying',
      'Pending defined operations the completer has already tried at least once (see `idem intents`)',
      'intents_retrying',
    );
  }

  return {
    registry,
    contentType: registry.contentType,
    onOperation(event) {
      operations.inc({ operation: event.operation, outcome: event.kind });
      duration.observe({ operation: event.operation, outcome: event.kind }, event.durationMs / 1000);
    },
    webhookRejected: (reason) => webhookRejections.inc({ reason }),
    inboxDuplicate: (consumer) => inboxDuplicates.inc({ consumer }),
    completion: (c) => completions.inc({ operation: c.scope.operation, outcome: c.kind }),
    render: () => registry.metrics(),
  };
}
