/**
 * The outbox dispatcher's options, their defaults, and their resolution in one place: what a
 * `createOutboxDispatcher({ ... })` call means, validated once, before anything runs.
 */
import { createBackoff, type Backoff, type BackoffOptions } from '../core/resilience/backoff.js';
import { defaultSchema } from '../core/schema-name.js';
import type { StoreOptions } from '../core/store.js';
import { validateTenants } from '../core/tenant.js';
import { nonNegative, positiveInteger } from '../core/validate.js';
import type { ListenSource } from './listener.js';
import { defaultPublishedRetentionMs } from './outbox.js';
import type { Publisher } from './types.js';

/** The dispatcher's default `backoff`: 1 s doubling to 5 minutes, equal jitter. */
export const dispatcherBackoff: BackoffOptions = {
  strategy: 'exponential',
  baseMs: 1000,
  maxMs: 300_000,
  factor: 2,
  jitter: 'equal',
};

/** The dispatcher's default `outageBackoff`: 250 ms doubling to 30 s, equal jitter. */
const outageBackoff: BackoffOptions = {
  strategy: 'exponential',
  baseMs: 250,
  maxMs: 30_000,
  jitter: 'equal',
};

/** Options of `createOutboxDispatcher`. */
export interface DispatcherOptions extends StoreOptions {
  /** Where events go. */
  publisher: Publisher;
  /** Only these topics. Default: every topic. Run one dispatcher per publisher when topics differ. */
  topics?: readonly string[];
  /**
   * Only these tenants' events: each batch is one tenant's, every statement pinned to it, taken in
   * turn (a dispatcher per shard of a database distributed by tenant, or per group of tenants).
   * Costs one claim per tenant per round, so keep the list to the tenants this dispatcher serves.
   * Default: every tenant, in one scan (what a single PostgreSQL or a cell wants).
   */
  tenants?: readonly string[];
  /**
   * Events per batch. Default 500: at this size the per-batch round trips are a few percent of the
   * time (see bench/messaging.bench.ts). A batch holds one transaction open while it publishes.
   */
  batchSize?: number;
  /** Failed attempts after which an event is parked as dead (its key waits for a redrive). Default 10. */
  maxAttempts?: number;
  /**
   * Backoff between attempts of one event. Default `dispatcherBackoff`: 1 s doubling to 5 min,
   * equal jitter (a delay in [d/2, d]).
   */
  backoff?: BackoffOptions;
  /**
   * A connection for LISTEN: a PostgreSQL connection string or node-postgres `Client` options
   * (idem loads `pg` and puts `pgConnectionDefaults` under them: a 5 s connect timeout, TCP
   * keepalive), or a factory returning a `pg.Client`-shaped client. Producers NOTIFY at commit, so
   * dispatch starts within milliseconds. A lost connection is replaced with backoff; one that went
   * silent (a partition) is found by the self-test below and replaced.
   * It must be a direct connection (or a session-mode pooler): through a transaction-mode pooler
   * such as PgBouncer LISTEN succeeds and then receives nothing. When `sql` goes through such a
   * pooler, give the direct URL here (e.g. `DATABASE_DIRECT_URL`). Default none: the dispatcher
   * only polls.
   */
  listen?: ListenSource;
  /**
   * How often the listener tests itself: it notifies its channel through `sql`, as producers do,
   * and checks the notification arrives; also at every (re)connection. 0 disables the self-test
   * altogether. Default 30000 ms (one `pg_notify` each time).
   */
  listenSelfTestIntervalMs?: number;
  /**
   * How long a self-test notification may take. When it does not arrive, an `error` event carries
   * an `IDEM_LISTEN_DEAF` error that says why (source `dispatcher`, where `listen`), the dispatcher
   * polls every `fallbackPollIntervalMs` until a later self-test passes, and the LISTEN connection
   * is replaced. Default 5000 ms.
   */
  listenSelfTestTimeoutMs?: number;
  /**
   * Poll interval while notifications cannot be relied on: the listener is deaf (its self-test
   * failed) or reconnecting. Default 250 ms, the interval without `listen`.
   */
  fallbackPollIntervalMs?: number;
  /**
   * Poll interval: the backstop for missed notifications and the latency when `listen` is unset.
   * Default 1000 ms with `listen`, 250 ms without (an idle poll is one short transaction).
   */
  pollIntervalMs?: number;
  /**
   * How long one publish call may take before the batch is abandoned (nothing marked, the events
   * published again later). Default 30000 ms.
   */
  publishTimeoutMs?: number;
  /**
   * Pause after the publisher could not reach its destination (`publish` threw or timed out):
   * no attempt is counted, so an outage never parks events. Default 250 ms doubling to 30 s,
   * equal jitter.
   */
  outageBackoff?: BackoffOptions;
  /**
   * Keep published rows this long, then delete them in small batches. 0 deletes each event as it
   * is marked (fastest). Default 86400000 ms (24 hours).
   */
  publishedRetentionMs?: number;
  /** How often this dispatcher sweeps published rows past `publishedRetentionMs`. 0 disables it. Default 60000 ms. */
  sweepIntervalMs?: number;
  /** Batch loops in this process, each like one more dispatcher. Default 1. */
  concurrency?: number;
  /** Random source for jitter, for tests. Default Math.random. */
  random?: () => number;
}

/** `DispatcherOptions` with every default applied and every value validated. */
export interface ResolvedDispatcherOptions {
  schema: string;
  /** The topics to dispatch, or null for all; and the same as JSON, for the claim statement. */
  topics: string[] | null;
  topicsJson: string | null;
  tenants: readonly string[] | undefined;
  batchSize: number;
  maxAttempts: number;
  backoff: Backoff;
  outageBackoff: Backoff;
  pollIntervalMs: number;
  fallbackPollIntervalMs: number;
  publishTimeoutMs: number;
  retentionMs: number;
  sweepIntervalMs: number;
  concurrency: number;
  /** The LISTEN self-test's timing, or undefined when it is off (`listenSelfTestIntervalMs: 0`). */
  selfTest: { intervalMs: number; timeoutMs: number } | undefined;
}

/** Applies the defaults documented on `DispatcherOptions`; throws `InvalidArgumentError` on a bad value. */
export function resolveDispatcherOptions(options: DispatcherOptions): ResolvedDispatcherOptions {
  const topics = options.topics ? [...options.topics] : null;
  const pollIntervalMs = positiveInteger(
    'pollIntervalMs',
    options.pollIntervalMs ?? (options.listen ? 1000 : 250),
  );
  return {
    schema: options.schema ?? defaultSchema,
    topics,
    topicsJson: topics ? JSON.stringify(topics) : null,
    tenants: validateTenants(options.tenants),
    batchSize: positiveInteger('batchSize', options.batchSize ?? 500),
    maxAttempts: positiveInteger('maxAttempts', options.maxAttempts ?? 10),
    backoff: createBackoff(options.backoff, dispatcherBackoff, options.random),
    outageBackoff: createBackoff(options.outageBackoff, outageBackoff, options.random),
    pollIntervalMs,
    fallbackPollIntervalMs: Math.min(
      pollIntervalMs,
      positiveInteger('fallbackPollIntervalMs', options.fallbackPollIntervalMs ?? 250),
    ),
    publishTimeoutMs: positiveInteger('publishTimeoutMs', options.publishTimeoutMs ?? 30_000),
    retentionMs: nonNegative(
      'publishedRetentionMs',
      options.publishedRetentionMs ?? defaultPublishedRetentionMs,
    ),
    sweepIntervalMs: nonNegative('sweepIntervalMs', options.sweepIntervalMs ?? 60_000),
    concurrency: positiveInteger('concurrency', options.concurrency ?? 1),
    selfTest:
      options.listenSelfTestIntervalMs === 0
        ? undefined
        : {
            intervalMs: positiveInteger(
              'listenSelfTestIntervalMs',
              options.listenSelfTestIntervalMs ?? 30_000,
            ),
            timeoutMs: positiveInteger('listenSelfTestTimeoutMs', options.listenSelfTestTimeoutMs ?? 5000),
          },
  };
}
