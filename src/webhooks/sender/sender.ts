/**
 * The sender: messages fanned out to subscribed endpoints as signed Standard Webhooks, with the
 * message id as `webhook-id` on every attempt. Each (message, endpoint) delivery retries on its own
 * schedule with jitter, never earlier than a `Retry-After` asks; 410 Gone disables the endpoint; a
 * circuit breaker per endpoint stops hammering one that keeps failing; every HTTP attempt is a row
 * in `webhook_delivery_attempts` with its status and latency. Loopback, private, link-local and
 * other special-purpose destinations are refused unless allowed (see destination.ts): such a
 * delivery fails at once with the reason, without a request.
 */
import { performance } from 'node:perf_hooks';
import { ConsecutiveBreaker } from 'cockatiel';
import { systemClock, toMillis, type Clock } from '../../core/clock.js';
import { InvalidArgumentError } from '../../core/errors.js';
import { createBackoff, type Backoff, type BackoffOptions } from '../../core/resilience/backoff.js';
import { CircuitBreaker, isCircuitOpen } from '../../core/resilience/circuit-breaker.js';
import { isUnhealthyStatus } from '../../core/resilience/http-failure.js';
import { parseRetryAfter, retryDelay } from '../../core/resilience/retry-after.js';
import type { Queryable, Sql } from '../../core/sql.js';
import { defaultTenant, validateTenant, validateTenants } from '../../core/tenant.js';
import { drainRounds, PollingWorker, type WorkerErrorHandler } from '../../core/worker/polling-worker.js';
import { defaultSchema } from '../../migrate/schema-name.js';
import { consoleLogger, errorMessage, type WebhookLogger } from '../logger.js';
import { DestinationPolicy, isDestinationRefused, type LookupFunction } from './destination.js';
import { WebhookEndpoints } from './endpoints.js';
import { WebhookHttpClient } from './http-post.js';
import { parseSigningSecret, signatureHeader, type SigningKey } from './sign.js';
import { senderStatements, type SenderStatements } from './statements.js';

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

/** The sender's default `backoff`: the Standard Webhooks schedule, each delay varied by ±20 %. */
export const senderBackoff: BackoffOptions = {
  strategy: 'schedule',
  delaysMs: standardRetrySchedule,
  jitter: 0.2,
};

/** A message to deliver. */
export interface WebhookMessage {
  /** The `webhook-id` on every attempt: use the outbox event id. 1–255 printable ASCII, no `.`. */
  id: string;
  /** The event type; endpoints subscribe by type. */
  type: string;
  /** The body: bytes or text as they are, anything else as JSON. Stored once; every attempt sends these bytes. */
  payload: unknown;
  /** Default `application/json`. */
  contentType?: string;
  /**
   * The tenant the message belongs to: it is delivered to that tenant's endpoints only, and its
   * rows live with the tenant's. Default: the sender's `tenant` option (`''` unless set).
   */
  tenant?: string;
}

/** Options of `createWebhookSender`. */
export interface WebhookSenderOptions<Client = unknown> {
  sql: Sql<Client>;
  /** Schema of idem's tables. Default `idem`. */
  schema?: string;
  /** Time for schedules, signatures' timestamps and `Retry-After` dates. Default: the system clock. */
  clock?: Clock;
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
  /** Default: warnings and errors to stderr as JSON. */
  logger?: WebhookLogger;
  /**
   * Errors the workers survive (a claim that failed: the database unreachable). Default: the
   * logger's `error`.
   */
  onError?: WorkerErrorHandler<'batch'>;
  /** The tenant of messages that name none, and of `endpoints`. Default `''`, the default tenant. */
  tenant?: string;
  /**
   * Only these tenants' deliveries: each claim is one tenant's, pinned to it, taken in turn
   * (workers per shard of a database distributed by tenant, or per group of tenants). Default:
   * every tenant, in one scan.
   */
  tenants?: readonly string[];
}

/** What one claimed delivery came to. */
export type AttemptOutcome =
  'delivered' | 'retry' | 'failed' | 'gone' | 'circuit-open' | 'cancelled' | 'lost';

export interface AttemptResult {
  tenant: string;
  messageId: string;
  endpointId: string;
  attempt: number;
  outcome: AttemptOutcome;
  /** The HTTP status, when an answer came. */
  status?: number;
  latencyMs?: number;
  /** When the next attempt is due, for `retry` and `circuit-open`. */
  nextAttemptAt?: Date;
}

/** A delivery as stored. */
export interface WebhookDelivery {
  tenant: string;
  messageId: string;
  endpointId: string;
  state: 'pending' | 'delivering' | 'delivered' | 'failed' | 'cancelled';
  attempts: number;
  nextAttemptAt: Date;
  lastStatus: number | null;
  lastError: string | null;
  deliveredAt: Date | null;
}

/** One logged HTTP attempt. */
export interface WebhookDeliveryAttempt {
  tenant: string;
  messageId: string;
  endpointId: string;
  attempt: number;
  startedAt: Date;
  status: number | null;
  latencyMs: number;
  outcome: 'delivered' | 'retry' | 'failed' | 'gone';
  error: string | null;
  retryAfterMs: number | null;
}

interface ClaimedDelivery {
  tenant_id: string;
  message_id: string;
  endpoint_id: string;
  attempts: number;
  event_type: string;
  payload: Uint8Array;
  content_type: string;
  url: string;
  secrets: string[];
  enabled: boolean;
}

/** Delivers messages to subscriber endpoints. */
export class WebhookSender<Client = unknown> {
  readonly schema: string;
  readonly clock: Clock;
  /** The endpoints of the sender's tenant (its `tenant` option). `endpointsOf` gives another tenant's. */
  readonly endpoints: WebhookEndpoints;
  /** The tenant of messages that name none, and of `endpoints`. */
  readonly tenant: string;
  /** @internal */ readonly sql: Sql<Client>;
  private readonly statements: SenderStatements;
  private readonly backoff: Backoff;
  /** Attempts per delivery, the first included. */
  readonly maxAttempts: number;
  private readonly maxRetryAfterMs: number;
  private readonly timeoutMs: number;
  private readonly breakerOptions: { consecutiveFailures: number; halfOpenAfterMs: number } | false;
  private readonly breakers = new Map<string, CircuitBreaker>();
  private readonly keys = new Map<string, SigningKey>();
  private readonly leaseMs: number;
  private readonly concurrency: number;
  private readonly pollIntervalMs: number;
  private readonly fetch: typeof fetch | undefined;
  private readonly destinations: DestinationPolicy;
  private readonly client: WebhookHttpClient;
  private readonly userAgent: string;
  private readonly logger: WebhookLogger;
  private readonly tenants: readonly string[] | undefined;
  /** Where the next claim of a sender scoped to tenants starts, so each gets its turn. */
  private nextTenant = 0;
  private readonly worker: PollingWorker;

  constructor(options: WebhookSenderOptions<Client>) {
    this.sql = options.sql;
    this.schema = options.schema ?? defaultSchema;
    this.statements = senderStatements(this.schema);
    this.clock = options.clock ?? systemClock;
    this.tenant = options.tenant ?? defaultTenant;
    validateTenant(this.tenant);
    this.tenants = validateTenants(options.tenants);
    this.destinations = new DestinationPolicy(options.allowedDestinations ?? [], options.lookup);
    this.client = new WebhookHttpClient(this.destinations);
    this.endpoints = new WebhookEndpoints(
      this.sql,
      this.statements,
      this.clock,
      this.tenant,
      this.destinations,
    );
    this.backoff = createBackoff(options.backoff, senderBackoff, options.random);
    const schedule = options.backoff ? options.backoff.delaysMs : senderBackoff.delaysMs;
    this.maxAttempts = positive('maxAttempts', options.maxAttempts ?? (schedule ? schedule.length + 1 : 10));
    this.maxRetryAfterMs = nonNegative('maxRetryAfterMs', options.maxRetryAfterMs ?? 24 * hour);
    this.timeoutMs = positive('timeoutMs', options.timeoutMs ?? 15 * second);
    this.breakerOptions =
      options.breaker === false
        ? false
        : {
            consecutiveFailures: positive('consecutiveFailures', options.breaker?.consecutiveFailures ?? 5),
            halfOpenAfterMs: positive('halfOpenAfterMs', options.breaker?.halfOpenAfterMs ?? 30 * second),
          };
    this.leaseMs = positive('leaseMs', options.leaseMs ?? 60 * second);
    if (this.leaseMs <= this.timeoutMs)
      throw new InvalidArgumentError('leaseMs must be longer than timeoutMs');
    this.concurrency = positive('concurrency', options.concurrency ?? 8);
    this.pollIntervalMs = positive('pollIntervalMs', options.pollIntervalMs ?? 1000);
    this.fetch = options.fetch;
    this.userAgent = options.userAgent ?? 'idem-webhooks';
    this.logger = options.logger ?? consoleLogger;
    const onError =
      options.onError ??
      ((error: unknown) =>
        this.logger.error?.('webhook sender could not claim deliveries', { error: errorMessage(error) }));
    this.worker = new PollingWorker({
      concurrency: this.concurrency,
      clock: this.clock,
      pollIntervalMs: () => this.pollIntervalMs,
      onError: (error) => onError(error, 'batch'),
      // One delivery per round and loop, so `concurrency` loops attempt that many at once.
      round: async () => ({ idleMs: (await this.runOnce(1)).length > 0 ? 0 : this.pollIntervalMs }),
    });
  }

  /** The endpoints of one tenant. */
  endpointsOf(tenant: string): WebhookEndpoints {
    validateTenant(tenant);
    return new WebhookEndpoints(this.sql, this.statements, this.clock, tenant, this.destinations);
  }

  /**
   * Stores the message and one delivery per enabled endpoint subscribed to its type, in one
   * statement on `db` (your transaction, to send only what commits; or the pool). A message id
   * stored before adds nothing. Returns the number of deliveries created.
   */
  async enqueue(db: Queryable, message: WebhookMessage): Promise<number> {
    if (!/^[\x21-\x2d\x2f-\x7e]{1,255}$/.test(message.id)) {
      throw new InvalidArgumentError(
        'a webhook message id must be 1–255 printable ASCII characters without "."',
      );
    }
    const tenant = message.tenant ?? this.tenant;
    validateTenant(tenant);
    const { rowCount } = await db.query(
      this.statements.enqueue,
      [
        message.id,
        message.type,
        encodePayload(message.payload),
        message.contentType ?? 'application/json',
        new Date(this.clock.now()),
        tenant,
      ],
      this.statements.names.enqueue,
    );
    return rowCount;
  }

  /**
   * Delivers one message now: stores it (as `enqueue`), then makes the first attempt to each
   * subscribed endpoint whose delivery is due. Failed deliveries stay scheduled for the workers.
   */
  async deliver(message: WebhookMessage): Promise<AttemptResult[]> {
    await this.enqueue(this.sql, message);
    return this.attemptDue({ messageId: message.id, tenant: message.tenant ?? this.tenant, limit: 1000 });
  }

  /** Claims up to `limit` due deliveries and attempts them concurrently. */
  async runOnce(limit = this.concurrency): Promise<AttemptResult[]> {
    if (!this.tenants) return this.attemptDue({ limit });
    // Scoped to tenants: one pinned claim per tenant until `limit`, starting one further each call.
    const results: AttemptResult[] = [];
    const start = this.nextTenant++ % this.tenants.length;
    for (let i = 0; i < this.tenants.length && results.length < limit; i++) {
      const tenant = this.tenants[(start + i) % this.tenants.length]!;
      results.push(...(await this.attemptDue({ tenant, limit: limit - results.length })));
    }
    return results;
  }

  /** Attempts due deliveries until none is due (bounded by `maxRounds`). */
  async drain(options: { limit?: number; maxRounds?: number } = {}): Promise<AttemptResult[]> {
    return drainRounds(() => this.runOnce(options.limit ?? this.concurrency), options.maxRounds);
  }

  /** Starts `concurrency` workers. Idempotent. */
  async start(): Promise<void> {
    this.worker.start();
  }

  /**
   * Stops the workers (idle ones at once, busy ones after their current attempt), and closes idle
   * connections.
   */
  async stop(): Promise<void> {
    await this.worker.stop();
    this.client.close();
  }

  /** Wakes idle workers now. */
  notify(): void {
    this.worker.notify();
  }

  /**
   * Puts failed (or cancelled) deliveries of enabled endpoints back to pending with fresh attempts;
   * of one tenant (`tenant`, one statement pinned to it) or of every tenant.
   */
  async redrive(
    options: {
      endpointId?: string;
      messageId?: string;
      states?: ('failed' | 'cancelled')[];
      tenant?: string;
    } = {},
  ): Promise<number> {
    const states = options.states ?? ['failed'];
    for (const state of states) {
      if (state !== 'failed' && state !== 'cancelled')
        throw new InvalidArgumentError(`cannot redrive ${String(state)} deliveries`);
    }
    const params = [
      new Date(this.clock.now()),
      states,
      options.endpointId ?? null,
      options.messageId ?? null,
    ];
    if (options.tenant !== undefined) validateTenant(options.tenant);
    const { rowCount } =
      options.tenant === undefined
        ? await this.sql.query(this.statements.redrive, params)
        : await this.sql.query(this.statements.redriveTenant, [...params, options.tenant]);
    if (rowCount > 0) this.notify();
    return rowCount;
  }

  /** Deliveries, optionally of one message, endpoint or tenant. */
  async deliveries(
    options: { messageId?: string; endpointId?: string; limit?: number; tenant?: string } = {},
  ): Promise<WebhookDelivery[]> {
    if (options.tenant !== undefined) validateTenant(options.tenant);
    const { rows } = await this.sql.query(this.statements.deliveries, [
      options.messageId ?? null,
      options.endpointId ?? null,
      options.limit ?? 1000,
      options.tenant ?? null,
    ]);
    return rows.map((r) => ({
      tenant: r.tenant_id as string,
      messageId: r.message_id as string,
      endpointId: r.endpoint_id as string,
      state: r.state as WebhookDelivery['state'],
      attempts: Number(r.attempts),
      nextAttemptAt: new Date(toMillis(r.next_attempt_at)!),
      lastStatus: r.last_status === null ? null : Number(r.last_status),
      lastError: (r.last_error as string | null) ?? null,
      deliveredAt: r.delivered_at ? new Date(toMillis(r.delivered_at)!) : null,
    }));
  }

  /** The logged HTTP attempts of a message (of the sender's tenant unless `tenant` is given), in order. */
  async attempts(
    messageId: string,
    endpointId?: string,
    options: { tenant?: string } = {},
  ): Promise<WebhookDeliveryAttempt[]> {
    const tenant = options.tenant ?? this.tenant;
    validateTenant(tenant);
    const { rows } = await this.sql.query(this.statements.attempts, [messageId, endpointId ?? null, tenant]);
    return rows.map((r) => ({
      tenant: r.tenant_id as string,
      messageId: r.message_id as string,
      endpointId: r.endpoint_id as string,
      attempt: Number(r.attempt),
      startedAt: new Date(toMillis(r.started_at)!),
      status: r.status === null ? null : Number(r.status),
      latencyMs: Number(r.latency_ms),
      outcome: r.outcome as WebhookDeliveryAttempt['outcome'],
      error: (r.error as string | null) ?? null,
      retryAfterMs: r.retry_after_ms === null ? null : Number(r.retry_after_ms),
    }));
  }

  /**
   * Deletes messages older than `olderThanMs` (default 30 days) whose deliveries are all finished.
   * `tenants` (default: the sender's, else every tenant) sweeps tenant by tenant, each batch pinned
   * to one; `maxBatches` counts per tenant.
   */
  async sweep(
    options: {
      olderThanMs?: number;
      batchSize?: number;
      maxBatches?: number;
      tenants?: readonly string[];
    } = {},
  ): Promise<{ deleted: number }> {
    const cutoff = new Date(this.clock.now() - (options.olderThanMs ?? 30 * 24 * hour));
    const batchSize = options.batchSize ?? 1000;
    const tenants = validateTenants(options.tenants) ?? this.tenants;
    let deleted = 0;
    for (const tenant of tenants ?? [null]) {
      for (let batch = 0; batch < (options.maxBatches ?? 1000); batch++) {
        const { rowCount } =
          tenant === null
            ? await this.sql.query(this.statements.sweep, [cutoff, batchSize])
            : await this.sql.query(this.statements.sweepTenant, [cutoff, batchSize, tenant]);
        deleted += rowCount;
        if (rowCount < batchSize) break;
      }
    }
    return { deleted };
  }

  private async attemptDue(options: {
    messageId?: string;
    tenant?: string;
    limit: number;
  }): Promise<AttemptResult[]> {
    const now = this.clock.now();
    const params = [new Date(now), options.limit, new Date(now + this.leaseMs), options.messageId ?? null];
    const claim = options.tenant === undefined ? 'claim' : 'claimTenant';
    const { rows } = await this.sql.query<ClaimedDelivery & Record<string, unknown>>(
      this.statements[claim],
      options.tenant === undefined ? params : [...params, options.tenant],
      this.statements.names[claim],
    );
    return Promise.all(rows.map((row) => this.attempt(row)));
  }

  private breakerFor(tenant: string, endpointId: string): CircuitBreaker | undefined {
    if (this.breakerOptions === false) return undefined;
    const key = `${tenant}\u0000${endpointId}`;
    let breaker = this.breakers.get(key);
    if (!breaker) {
      breaker = new CircuitBreaker(endpointId, {
        clock: this.clock,
        halfOpenAfterMs: this.breakerOptions.halfOpenAfterMs,
        breaker: new ConsecutiveBreaker(this.breakerOptions.consecutiveFailures),
      });
      this.breakers.set(key, breaker);
    }
    return breaker;
  }

  private signingKey(secret: string): SigningKey {
    let key = this.keys.get(secret);
    if (!key) {
      key = parseSigningSecret(secret);
      this.keys.set(secret, key);
    }
    return key;
  }

  private async attempt(row: ClaimedDelivery): Promise<AttemptResult> {
    const base = {
      tenant: row.tenant_id,
      messageId: row.message_id,
      endpointId: row.endpoint_id,
      attempt: row.attempts,
    };
    const fence = [row.message_id, row.endpoint_id, row.attempts];
    if (!row.enabled) {
      await this.sql.query(this.statements.release, [
        ...fence,
        'cancelled',
        new Date(this.clock.now()),
        'endpoint disabled',
        row.tenant_id,
      ]);
      return { ...base, outcome: 'cancelled' };
    }
    if (row.attempts > this.maxAttempts) {
      // Only after lost workers: each claim counted an attempt that never reported back.
      await this.settle(
        row,
        'failed',
        null,
        'attempts exhausted: the workers that claimed it never finished',
      );
      return { ...base, outcome: 'failed' };
    }

    const startedAt = this.clock.now();
    const timestamp = Math.floor(startedAt / 1000);
    const body = row.payload;
    const headers: Record<string, string> = {
      'content-type': row.content_type,
      'user-agent': this.userAgent,
      'webhook-id': row.message_id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signatureHeader(
        row.secrets.map((s) => this.signingKey(s)),
        row.message_id,
        timestamp,
        body,
      ),
    };

    const breaker = this.breakerFor(row.tenant_id, row.endpoint_id);
    const t0 = performance.now();
    let status: number | undefined;
    let retryAfterHeader: string | undefined;
    let failure: unknown;
    try {
      const send = () => this.post(row.url, headers, body);
      const answer = breaker
        ? await breaker.execute(send, (outcome) =>
            // A refused destination is no sign of the endpoint's health: it fails on its own, at once.
            'error' in outcome
              ? !isDestinationRefused(outcome.error)
              : isUnhealthyStatus(outcome.value.status),
          )
        : await send();
      status = answer.status;
      retryAfterHeader = answer.retryAfter;
    } catch (error) {
      if (isCircuitOpen(error)) {
        const next = new Date(
          this.clock.now() + (this.breakerOptions ? this.breakerOptions.halfOpenAfterMs : 0),
        );
        await this.sql.query(this.statements.release, [
          ...fence,
          'pending',
          next,
          'circuit open: endpoint failing',
          row.tenant_id,
        ]);
        return { ...base, outcome: 'circuit-open', nextAttemptAt: next };
      }
      failure = error;
    }
    const latencyMs = performance.now() - t0;
    const now = this.clock.now();

    let outcome: 'delivered' | 'retry' | 'failed' | 'gone';
    let retryAfterMs: number | undefined;
    let next = new Date(now);
    if (status !== undefined && status >= 200 && status < 300) outcome = 'delivered';
    else if (status === 410) outcome = 'gone';
    // Not retried: the same URL resolves to the same kind of address until someone changes it.
    else if (isDestinationRefused(failure)) outcome = 'failed';
    else {
      retryAfterMs = parseRetryAfter(retryAfterHeader, now);
      if (retryAfterMs !== undefined) retryAfterMs = Math.min(retryAfterMs, this.maxRetryAfterMs);
      if (row.attempts >= this.maxAttempts) outcome = 'failed';
      else {
        outcome = 'retry';
        next = new Date(now + retryDelay(this.backoff(row.attempts), retryAfterMs, this.maxRetryAfterMs));
      }
    }
    const error =
      failure !== undefined ? errorMessage(failure) : outcome === 'delivered' ? null : `HTTP ${status}`;

    await this.sql.transaction(async (tx) => {
      await tx.query(
        this.statements.recordAttempt,
        [
          row.message_id,
          row.endpoint_id,
          row.attempts,
          new Date(startedAt),
          status ?? null,
          latencyMs,
          outcome,
          error,
          retryAfterMs ?? null,
          row.tenant_id,
        ],
        this.statements.names.recordAttempt,
      );
      const state = outcome === 'retry' ? 'pending' : outcome === 'gone' ? 'cancelled' : outcome;
      await tx.query(
        this.statements.settle,
        [...fence, state, next, status ?? null, error, new Date(now), row.tenant_id],
        this.statements.names.settle,
      );
      if (outcome === 'gone') {
        await tx.query(this.statements.disableEndpoint, [
          row.endpoint_id,
          'gone: the endpoint answered 410',
          new Date(now),
          row.tenant_id,
        ]);
        await tx.query(this.statements.cancelEndpointDeliveries, [
          row.endpoint_id,
          'endpoint disabled: it answered 410 Gone',
          row.tenant_id,
        ]);
      }
    });

    const fields = { ...base, status: status ?? null, outcome, latencyMs: Math.round(latencyMs) };
    if (outcome === 'delivered') this.logger.debug?.('webhook delivered', fields);
    else if (outcome === 'gone') this.logger.warn?.('webhook endpoint disabled after 410 Gone', fields);
    else
      this.logger.warn?.(
        outcome === 'failed' ? 'webhook delivery failed' : 'webhook delivery will be retried',
        { ...fields, error },
      );
    return {
      ...base,
      outcome,
      status,
      latencyMs,
      ...(outcome === 'retry' ? { nextAttemptAt: next } : {}),
    };
  }

  private async settle(
    row: ClaimedDelivery,
    state: string,
    status: number | null,
    error: string,
  ): Promise<void> {
    const now = new Date(this.clock.now());
    await this.sql.query(this.statements.settle, [
      row.message_id,
      row.endpoint_id,
      row.attempts,
      state,
      now,
      status,
      error,
      now,
      row.tenant_id,
    ]);
  }

  /** One attempt. A redirect is never followed: it is a failed attempt (update the endpoint's URL). */
  private async post(
    url: string,
    headers: Record<string, string>,
    body: Uint8Array,
    signal?: AbortSignal,
  ): Promise<{ status: number; retryAfter: string | undefined }> {
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const both = signal ? AbortSignal.any([signal, timeout]) : timeout;
    if (!this.fetch) return this.client.post(url, headers, body, both);
    const refused = this.destinations.literalRefusal(new URL(url));
    if (refused) throw refused;
    const response = await this.fetch(url, {
      method: 'POST',
      headers,
      body: body as Uint8Array<ArrayBuffer>,
      redirect: 'manual',
      signal: both,
    });
    // The answer's body is not needed; releasing it frees the connection.
    await response.body?.cancel().catch(() => undefined);
    return { status: response.status, retryAfter: response.headers.get('retry-after') ?? undefined };
  }
}

/** Creates a sender. See `WebhookSenderOptions`. */
export function createWebhookSender<Client>(options: WebhookSenderOptions<Client>): WebhookSender<Client> {
  return new WebhookSender(options);
}

function encodePayload(payload: unknown): Buffer {
  if (payload instanceof Uint8Array)
    return Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  if (typeof payload === 'string') return Buffer.from(payload, 'utf8');
  const json = JSON.stringify(payload);
  if (json === undefined) throw new InvalidArgumentError('a webhook payload must be bytes, text or JSON');
  return Buffer.from(json, 'utf8');
}

function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0)
    throw new InvalidArgumentError(`${name} must be a positive number`);
  return value;
}

function nonNegative(name: string, value: number): number {
  if (!Number.isFinite(value) || value < 0)
    throw new InvalidArgumentError(`${name} must be a non-negative number`);
  return value;
}
