/**
 * Prometheus metrics for idem, with prom-client. Counters subscribe to idem's event channel
 * (operation outcomes, webhook refusals, inbox duplicates, completions); gauges are idem's snapshot
 * (observability/snapshot.ts, the console's counts, by the same definitions), read from the tables
 * when Prometheus scrapes, in one statement, so they are right across every process that shares
 * the database.
 *
 * @example
 * const events = createEvents();
 * const metrics = createIdemMetrics({ sql, schema: 'idem', events });
 * const idem = createIdem({ sql, events });
 * app.get('/metrics', async (_req, reply) => reply.type(metrics.contentType).send(await metrics.render()));
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { systemClock, type Clock } from '../core/clock.js';
import type { IdemEvents } from '../core/event-channel.js';
import type { Queryable } from '../core/sql.js';
import { defaultSchema, quoteSchema } from '../core/schema-name.js';
import { readSnapshot, type IdemSnapshot } from './snapshot.js';

export interface IdemMetricsOptions {
  /** Where the gauges (idem's snapshot) are read from. Without it, only the event counters are exported. */
  sql?: Queryable;
  /** Schema of idem's tables. Default `idem`. */
  schema?: string;
  /**
   * The clock "stuck" and lag are measured on: pass the one your modules use. Default: the system
   * clock.
   */
  clock?: Clock;
  /**
   * The event channel to count from (`createEvents()`, the one passed to your modules). Default:
   * none; `subscribe(events)` adds one later.
   */
  events?: IdemEvents;
  /** Registry to register on. Default: a new one (use `render()`), so several instances never clash. */
  registry?: Registry;
  /** Metric name prefix. Default `idem_`. */
  prefix?: string;
}

export interface IdemMetrics {
  registry: Registry;
  contentType: string;
  /**
   * Counts the events of `events` (operations, webhook refusals, inbox duplicates, completions);
   * returns the function that stops. `createIdemMetrics({ events })` subscribes to it already.
   */
  subscribe(events: IdemEvents): () => void;
  render(): Promise<string>;
}

/**
 * Creates the metrics, registered on `registry` (default a new one). See the module's example.
 *
 * @example
 * const metrics = createIdemMetrics({ sql, schema: 'idem', events });
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
    const clock = options.clock ?? systemClock;
    let pending: Promise<IdemSnapshot> | undefined;
    // Every gauge of one scrape shares one snapshot: one round trip, the console's definitions.
    const shared = () => {
      pending ??= readSnapshot(sql, schema, clock.now()).finally(() =>
        setTimeout(() => (pending = undefined), 100),
      );
      return pending;
    };
    const gauge = (name: string, help: string, value: (snapshot: IdemSnapshot) => number | null) =>
      new Gauge({
        name: `${prefix}${name}`,
        help,
        registers: [registry],
        async collect() {
          this.set(value(await shared()) ?? 0);
        },
      });
    gauge('outbox_backlog', 'Outbox events not yet published (excluding dead)', (s) => s.outbox.backlog);
    gauge('outbox_lag_seconds', 'Age of the oldest unpublished outbox event', (s) =>
      s.outbox.lagMs === null ? 0 : s.outbox.lagMs / 1000,
    );
    gauge(
      'outbox_retrying',
      'Unpublished outbox events whose publish failed at least once',
      (s) => s.outbox.retrying,
    );
    gauge('outbox_dead', 'Outbox events parked as dead after their last attempt', (s) => s.outbox.dead);
    gauge('inbox_dead', 'Inbox messages recorded as dead', (s) => s.inbox.dead);
    gauge(
      'webhook_receipts_backlog',
      'Webhook receipts pending or being processed',
      (s) => s.receipts.backlog,
    );
    gauge(
      'webhook_receipts_stuck',
      'Webhook receipts being processed past their due time (the worker that claimed them is gone)',
      (s) => s.receipts.stuck,
    );
    gauge('webhook_receipts_dead', 'Webhook receipts dead-lettered', (s) => s.receipts.dead);
    gauge(
      'webhook_receipts_superseded',
      'Webhook receipts recorded as superseded (state events older than the applied version)',
      (s) => s.receipts.superseded,
    );
    gauge(
      'webhook_receipts_waiting',
      'Webhook receipts waiting for their entity (busy, or an earlier sequence version missing)',
      (s) => s.receipts.waiting,
    );
    gauge(
      'webhook_entities_parked',
      'Sequence entities parked on a gap: a later version waited past the gap timeout for a missing one',
      (s) => s.receipts.parked,
    );
    gauge(
      'webhook_deliveries_failed',
      'Webhooks to send whose last attempt failed for good',
      (s) => s.deliveries.failed,
    );
    gauge('tasks_stuck', 'Claimed tasks whose lease lapsed (the worker is gone)', (s) => s.tasks.stuck);
    gauge('tasks_dead', 'Claimed tasks dead-lettered', (s) => s.tasks.dead);
    gauge(
      'requests_stuck',
      'Pending keyed operations that nobody holds: their lease lapsed',
      (s) => s.requests.stuck,
    );
    gauge('sagas_stuck', "Sagas whose compensation could not finish (an operator's)", (s) => s.sagas.stuck);
    gauge('sagas_stalled', 'Running sagas that nobody holds: their lease lapsed', (s) => s.sagas.stalled);
    gauge(
      'intents_waiting',
      'Pending defined operations (idem.define): running, or waiting for the completer',
      (s) => s.intents.waiting,
    );
    gauge(
      'intents_retrying',
      'Pending defined operations the completer has already tried at least once (see `idem intents`)',
      (s) => s.intents.retrying,
    );
  }

  const subscribe = (events: IdemEvents) => {
    const stops = [
      events.on('operation', (event) => {
        operations.inc({ operation: event.operation, outcome: event.kind });
        duration.observe({ operation: event.operation, outcome: event.kind }, event.durationMs / 1000);
      }),
      events.on('webhook:rejected', (event) => webhookRejections.inc({ reason: event.reason })),
      events.on('inbox:duplicate', (event) => inboxDuplicates.inc({ consumer: event.consumer })),
      events.on('completion', (event) =>
        completions.inc({ operation: event.scope.operation, outcome: event.kind }),
      ),
    ];
    return () => stops.forEach((stop) => stop());
  };
  if (options.events) subscribe(options.events);

  return {
    registry,
    contentType: registry.contentType,
    subscribe,
    render: () => registry.metrics(),
  };
}
