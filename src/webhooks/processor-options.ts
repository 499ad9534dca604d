/**
 * The processor's options, with their defaults, resolved and checked in one place when the
 * processor is made.
 */
import { createBackoff, type BackoffOptions } from '../core/resilience/backoff.js';
import type { StoreOptions } from '../core/store.js';
import { validateTenants } from '../core/tenant.js';
import { positiveInteger } from '../core/validate.js';
import type { WebhookHandlers } from './handlers.js';

/** The processor's default `backoff`: 5 s doubling to at most 1 hour, equal jitter. */
export const processorBackoff: BackoffOptions = {
  strategy: 'exponential',
  baseMs: 5000,
  maxMs: 3_600_000,
  jitter: 'equal',
};

/**
 * Options of `createWebhookProcessor`. `sql` is a pool: every receipt is processed in its own
 * transaction; `clock` times claims, leases, backoff, gaps and retention.
 */
export interface WebhookProcessorOptions<Client = unknown> extends StoreOptions<Client> {
  handlers: WebhookHandlers<Client>;
  /**
   * Receipts processed at once by `start()`, each holding one connection while its handler runs.
   * Default 4. Keep it below the pool size so the receiver always finds a connection to store a
   * receipt: answering fast matters more than draining fast.
   */
  concurrency?: number;
  /** How often idle workers look for due receipts, in ms. Default 1000. `notify()` wakes them at once. */
  pollIntervalMs?: number;
  /**
   * How long a claim is held before another worker may take the receipt over, in ms. It only
   * matters when a worker dies between claiming and committing: a live worker holds the row lock.
   * Default 60 000.
   */
  leaseMs?: number;
  /**
   * Handler attempts before a receipt becomes a dead letter. Default 12 (about 2.5 hours with the
   * default backoff). Waiting for a busy entity or a missing version is not an attempt.
   */
  maxAttempts?: number;
  /**
   * Backoff between attempts. Default `processorBackoff`: 5 s doubling to at most 1 hour, equal
   * jitter (a delay in [d/2, d]).
   */
  backoff?: BackoffOptions;
  /**
   * `sequence` handlers: how long a later version waits for a missing one before its entity is
   * parked, in ms. Default 900 000 (15 minutes: longer than a sender's first few retries, so a
   * delivery that failed once is not reported; short enough that a lost one is seen the same
   * hour). A handler's own `gapTimeoutMs` wins.
   */
  gapTimeoutMs?: number;
  /**
   * When a receipt's entity is being handled by another worker, the longest it waits before it is
   * looked at again, in ms (half to all of it, at random). Default 500. It is usually sooner: the
   * worker that holds the entity wakes its waiting receipts when it commits; this bound covers
   * the receipt that started waiting just after that.
   */
  entityBusyRetryMs?: number;
  /** Random numbers in [0, 1) for jitter. Default `Math.random`. */
  random?: () => number;
  /**
   * Only these tenants' receipts: each claim is one tenant's, pinned to it, taken in turn (workers
   * per shard of a database distributed by tenant, or per group of tenants). Default: every tenant,
   * in one scan.
   */
  tenants?: readonly string[];
}

/** The options the claim loop and the ordering engine read, with their defaults. */
export interface ResolvedProcessorOptions {
  concurrency: number;
  pollIntervalMs: number;
  leaseMs: number;
  maxAttempts: number;
  gapTimeoutMs: number;
  entityBusyRetryMs: number;
  random: () => number;
  /** The backoff before the next attempt, after `failures` failed ones. */
  delay: (failures: number) => number;
  /** `undefined`: every tenant, in one scan. */
  tenants: readonly string[] | undefined;
}

/** Applies the defaults and checks every option; throws `InvalidArgumentError` on a bad one. */
export function resolveProcessorOptions<Client>(
  options: WebhookProcessorOptions<Client>,
): ResolvedProcessorOptions {
  const random = options.random ?? Math.random;
  return {
    concurrency: positiveInteger('concurrency', options.concurrency ?? 4),
    pollIntervalMs: positiveInteger('pollIntervalMs', options.pollIntervalMs ?? 1000),
    leaseMs: positiveInteger('leaseMs', options.leaseMs ?? 60_000),
    maxAttempts: positiveInteger('maxAttempts', options.maxAttempts ?? 12),
    gapTimeoutMs: positiveInteger('gapTimeoutMs', options.gapTimeoutMs ?? 900_000),
    entityBusyRetryMs: positiveInteger('entityBusyRetryMs', options.entityBusyRetryMs ?? 500),
    random,
    delay: createBackoff(options.backoff, processorBackoff, random),
    tenants: validateTenants(options.tenants),
  };
}
