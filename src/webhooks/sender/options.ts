/** The sender's options, their defaults, and their checks. */
import { InvalidArgumentError } from '../../core/errors.js';
import type { BackoffOptions } from '../../core/resilience/backoff.js';
import type { StoreOptions } from '../../core/store.js';
import { nonNegative, positive } from '../../core/validate.js';
import type { LookupFunction } from './destination.js';

const second = 1000;
const minute = 60 * second;
const hour = 60 * minute;

/**
 * The retry schedule of the Standard Webhooks spec: the delay before attempt 2, 3, …; 10 attempts
 * over about 75 hours.
 */
export const standardRetrySchedule: readonly number[] = [
  5 * second,
  5 * minute,
  30 * minute,
  2 * hour,
  5 * hour,
  10 * hour,
  14 * hour,
  20 * hour,
  24 * hour,
];

/** How long `sweep` keeps finished messages by default: 30 days. */
export const defaultMessagesRetentionMs = 30 * 24 * hour;

/** The sender's default `backoff`: the Standard Webhooks schedule, each delay varied by ±20 %. */
export const senderBackoff: BackoffOptions = {
  strategy: 'schedule',
  delaysMs: standardRetrySchedule,
  jitter: 0.2,
};

/**
 * Options of `createWebhookSender`. `clock` times schedules, signatures' timestamps, `Retry-After`
 * dates and the breakers' open period.
 */
export interface WebhookSenderOptions<Client = unknown> extends StoreOptions<Client> {
  /** Random numbers in [0, 1) for jitter. Default `Math.random`. */
  random?: () => number;
  /**
   * Delays between attempts. Default `senderBackoff`: the Standard Webhooks schedule
   * (`standardRetrySchedule`, 10 attempts over ~75 hours), each delay varied by ±20 %.
   */
  backoff?: BackoffOptions;
  /**
   * Attempts per delivery, the first included. Default: one more than the schedule's delays when
   * `backoff` is a schedule (10 with the default), else 10.
   */
  maxAttempts?: number;
  /**
   * The longest wait a `Retry-After` may ask for, in ms; a longer ask is capped to it. Default 24
   * hours. The wait is never shorter than the backoff's.
   */
  maxRetryAfterMs?: number;
  /** Per-attempt timeout in ms (the spec recommends 15–30 s). Default 15 000. */
  timeoutMs?: number;
  /**
   * The circuit breaker per endpoint (in this process, on `clock`): after `consecutiveFailures`
   * unhealthy failures in a row (network error, timeout, 408, 5xx except 501: see
   * `isUnhealthyStatus`; not 429) no request is made for `halfOpenAfterMs`; due
   * deliveries to it are put back without spending an attempt. `false` disables it.
   * Default `{ consecutiveFailures: 5, halfOpenAfterMs: 30 000 }`.
   */
  breaker?: { consecutiveFailures?: number; halfOpenAfterMs?: number } | false;
  /** How long a claimed delivery is held before another worker may take it over. Default 60 000 (> timeoutMs). */
  leaseMs?: number;
  /** Deliveries attempted at once by `start()`. Default 8. */
  concurrency?: number;
  /** How often idle workers look for due deliveries, in ms. Default 1000. */
  pollIntervalMs?: number;
  /**
   * Destinations the sender may reach although they are loopback, private, link-local, multicast,
   * unspecified or otherwise special-purpose (IPv4 or IPv6, IPv4 inside IPv6 included): CIDR blocks
   * (`10.0.0.0/8`, `fd00::/8`), single addresses (`127.0.0.1`, `::1`) or host names (exact,
   * case-insensitive; such a name is reached whatever it resolves to). Default none: every such
   * destination is refused, checked on the address actually connected to, after DNS, so a name
   * that resolves to an internal address is refused too. A refused delivery fails at once, with the
   * reason as its error; endpoints with a refused literal address cannot be created. For tests on
   * 127.0.0.1, pass `['127.0.0.1']`; for an internal deployment, its blocks or names.
   */
  allowedDestinations?: readonly string[];
  /**
   * The DNS lookup for endpoint host names, as `dns.lookup` with `{ all: true }`. Default
   * `dns.lookup`. Every address it returns is checked against the destination rules.
   */
  lookup?: LookupFunction;
  /**
   * Sends attempts with this `fetch` instead of idem's own client. Default: idem's node:http
   * client, which checks destinations at connect time. A custom `fetch` connects as it likes: idem
   * then checks only a URL whose host is an IP literal, so a host name that resolves to an
   * internal address is **not** refused; give one only with your own egress control.
   */
  fetch?: typeof fetch;
  /** Default `idem-webhooks`. */
  userAgent?: string;
  /** The tenant of messages that name none, and of `endpoints`. Default `''`, the default tenant. */
  tenant?: string;
  /**
   * Only these tenants' deliveries: each claim is one tenant's, pinned to it, taken in turn
   * (workers per shard of a database distributed by tenant, or per group of tenants). Default:
   * every tenant, in one scan.
   */
  tenants?: readonly string[];
}

/** What the sender reads from its options, checked and with the defaults filled in. */
export interface ResolvedSenderOptions {
  maxAttempts: number;
  maxRetryAfterMs: number;
  timeoutMs: number;
  breaker: { consecutiveFailures: number; halfOpenAfterMs: number } | false;
  leaseMs: number;
  concurrency: number;
  pollIntervalMs: number;
  userAgent: string;
}

/** Checks the numeric options and fills in their defaults. */
export function resolveSenderOptions<Client>(options: WebhookSenderOptions<Client>): ResolvedSenderOptions {
  const schedule = options.backoff ? options.backoff.delaysMs : senderBackoff.delaysMs;
  const timeoutMs = positive('timeoutMs', options.timeoutMs ?? 15 * second);
  const leaseMs = positive('leaseMs', options.leaseMs ?? 60 * second);
  if (leaseMs <= timeoutMs) throw new InvalidArgumentError('leaseMs must be longer than timeoutMs');
  return {
    maxAttempts: positive('maxAttempts', options.maxAttempts ?? (schedule ? schedule.length + 1 : 10)),
    maxRetryAfterMs: nonNegative('maxRetryAfterMs', options.maxRetryAfterMs ?? 24 * hour),
    timeoutMs,
    breaker:
      options.breaker === false
        ? false
        : {
            consecutiveFailures: positive('consecutiveFailures', options.breaker?.consecutiveFailures ?? 5),
            halfOpenAfterMs: positive('halfOpenAfterMs', options.breaker?.halfOpenAfterMs ?? 30 * second),
          },
    leaseMs,
    concurrency: positive('concurrency', options.concurrency ?? 8),
    pollIntervalMs: positive('pollIntervalMs', options.pollIntervalMs ?? 1000),
    userAgent: options.userAgent ?? 'idem-webhooks',
  };
}
