/**
 * Prometheus metrics for idem, with prom-client. Counters subscribe to idem's event channel
 * (operation outcomes, webhook refusals, inbox duplicates, completions); gauges are idem's snapshot
 * (observability/snapshot.ts, the console's counts, by the same definitions; which count each gauge
 * exports is the table in snapshot-gauges.ts), read from the tables when Prometheus scrapes, in one
 * statement, so they are right across every process that shares the database.
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
import { snapshotGauges } from './snapshot-gauges.js';
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
    for (const { name, help, read } of snapshotGauges) {
      new Gauge({
        name: `${prefix}${name}`,
        help,
        registers: [registry],
        async collect() {
          this.set(read(await shared()) ?? 0);
        },
      });
    }
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
