/**
 * The sender: messages fanned out to subscribed endpoints as signed Standard Webhooks, with the
 * message id as `webhook-id` on every attempt. Each (message, endpoint) delivery retries on its own
 * schedule with jitter, never earlier than a `Retry-After` asks; 410 Gone disables the endpoint; a
 * circuit breaker per endpoint stops hammering one that keeps failing; every HTTP attempt is a row
 * in `webhook_delivery_attempts` with its status and latency. Loopback, private, link-local and
 * other special-purpose destinations are refused unless allowed (see destination.ts): such a
 * delivery fails at once with the reason, without a request.
 */
import { currentCausation } from '../../core/causation.js';
import { InvalidArgumentError } from '../../core/errors.js';
import { createBackoff } from '../../core/resilience/backoff.js';
import { TableModule } from '../../core/store.js';
import type { Queryable } from '../../core/sql.js';
import { acrossOrPinned } from '../../core/statement.js';
import {
  cutoffBefore,
  sweepInBatches,
  type RetentionSweepOptions,
  type SweepResult,
} from '../../core/sweeper.js';
import { defaultTenant, validateTenant, validateTenants } from '../../core/tenant.js';
import { drainRounds, PollingWorker } from '../../core/worker/polling-worker.js';
import { DeliveryAttempts } from './attempt.js';
import {
  decodeAttempt,
  decodeDelivery,
  encodePayload,
  validateMessageId,
  type AttemptResult,
  type WebhookDelivery,
  type WebhookDeliveryAttempt,
  type WebhookMessage,
} from './delivery.js';
import { DestinationPolicy } from './destination.js';
import { WebhookEndpoints } from './endpoints.js';
import {
  defaultMessagesRetentionMs,
  resolveSenderOptions,
  senderBackoff,
  type ResolvedSenderOptions,
  type WebhookSenderOptions,
} from './options.js';
import { renderSenderStatements, type SenderStatements } from './statements.js';
import { AttemptTransport } from './transport.js';

export {
  defaultMessagesRetentionMs,
  senderBackoff,
  standardRetrySchedule,
  type WebhookSenderOptions,
} from './options.js';
export type {
  AttemptOutcome,
  AttemptResult,
  WebhookDelivery,
  WebhookDeliveryAttempt,
  WebhookMessage,
} from './delivery.js';

/** Delivers messages to subscriber endpoints. */
export class WebhookSender<Client = unknown> extends TableModule<Client, SenderStatements> {
  /** The endpoints of the sender's tenant (its `tenant` option). `endpointsOf` gives another tenant's. */
  readonly endpoints: WebhookEndpoints;
  /** The tenant of messages that name none, and of `endpoints`. */
  readonly tenant: string;
  /** Attempts per delivery, the first included. */
  readonly maxAttempts: number;
  private readonly options: ResolvedSenderOptions;
  private readonly destinations: DestinationPolicy;
  private readonly transport: AttemptTransport;
  private readonly attempter: DeliveryAttempts<Client>;
  private readonly tenants: readonly string[] | undefined;
  /** Where the next claim of a sender scoped to tenants starts, so each gets its turn. */
  private nextTenant = 0;
  private readonly worker: PollingWorker;

  constructor(options: WebhookSenderOptions<Client>) {
    super(options, renderSenderStatements);
    this.tenant = options.tenant ?? defaultTenant;
    validateTenant(this.tenant);
    this.tenants = validateTenants(options.tenants);
    this.options = resolveSenderOptions(options);
    this.maxAttempts = this.options.maxAttempts;
    this.destinations = new DestinationPolicy(options.allowedDestinations ?? [], options.lookup);
    this.transport = new AttemptTransport(this.destinations, this.options.timeoutMs, options.fetch);
    this.endpoints = new WebhookEndpoints(
      this.sql,
      this.statements,
      this.clock,
      this.tenant,
      this.destinations,
    );
    this.attempter = new DeliveryAttempts(
      this.sql,
      this.statements,
      this.clock,
      this.options,
      createBackoff(options.backoff, senderBackoff, options.random),
      this.transport,
      this.events,
    );
    this.worker = new PollingWorker({
      concurrency: this.options.concurrency,
      clock: this.clock,
      pollIntervalMs: () => this.options.pollIntervalMs,
      onError: (error) => this.events.emit('error', { source: 'webhook-sender', where: 'batch', error }),
      // One delivery per round and loop, so `concurrency` loops attempt that many at once.
      round: async () => ({ idleMs: (await this.runOnce(1)).length > 0 ? 0 : this.options.pollIntervalMs }),
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
    validateMessageId(message.id);
    const tenant = message.tenant ?? this.tenant;
    validateTenant(tenant);
    return this.statements.enqueue(db, {
      tenant,
      id: message.id,
      type: message.type,
      payload: encodePayload(message.payload),
      contentType: message.contentType ?? 'application/json',
      now: new Date(this.clock.now()),
      cause: currentCausation(),
    });
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
  async runOnce(limit = this.options.concurrency): Promise<AttemptResult[]> {
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
    return drainRounds(() => this.runOnce(options.limit ?? this.options.concurrency), options.maxRounds);
  }

  /** Starts `concurrency` workers. Idempotent. */
  async start(): Promise<void> {
    await this.worker.start();
  }

  /**
   * Stops the workers (idle ones at once, busy ones after their current attempt), and closes idle
   * connections.
   */
  async stop(): Promise<void> {
    await this.worker.stop();
    this.transport.close();
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
    const which = {
      now: new Date(this.clock.now()),
      states,
      endpointId: options.endpointId ?? null,
      messageId: options.messageId ?? null,
    };
    const { redrive, redriveTenant } = this.statements;
    const redriven = await acrossOrPinned(
      this.sql,
      { across: redrive, pinned: redriveTenant },
      which,
      options.tenant,
    );
    if (redriven > 0) this.notify();
    return redriven;
  }

  /** Deliveries, optionally of one message, endpoint or tenant. */
  async listDeliveries(
    options: { messageId?: string; endpointId?: string; limit?: number; tenant?: string } = {},
  ): Promise<WebhookDelivery[]> {
    if (options.tenant !== undefined) validateTenant(options.tenant);
    const rows = await this.statements.deliveries(this.sql, {
      messageId: options.messageId ?? null,
      endpointId: options.endpointId ?? null,
      limit: options.limit ?? 1000,
      tenant: options.tenant ?? null,
    });
    return rows.map(decodeDelivery);
  }

  /**
   * The logged HTTP attempts of a message (to one endpoint, or every one; of the sender's tenant
   * unless `tenant` is given), in order.
   */
  async listAttempts(options: {
    messageId: string;
    endpointId?: string;
    tenant?: string;
  }): Promise<WebhookDeliveryAttempt[]> {
    const tenant = options.tenant ?? this.tenant;
    validateTenant(tenant);
    const rows = await this.statements.attempts(this.sql, {
      tenant,
      messageId: options.messageId,
      endpointId: options.endpointId ?? null,
    });
    return rows.map(decodeAttempt);
  }

  /**
   * Deletes messages older than `olderThanMs` (default 30 days) whose deliveries are all finished,
   * in bounded batches (see `SweepOptions`). `tenants` defaults to the sender's, else every tenant.
   */
  sweep(options: RetentionSweepOptions = {}): Promise<SweepResult> {
    return sweepInBatches(
      this.sql,
      this.clock,
      [
        {
          statement: this.statements.sweep,
          tenantStatement: this.statements.sweepTenant,
          cutoff: cutoffBefore(this.clock, options.olderThanMs ?? defaultMessagesRetentionMs),
        },
      ],
      { ...(this.tenants ? { tenants: this.tenants } : {}), ...options },
    );
  }

  private async attemptDue(options: {
    messageId?: string;
    tenant?: string;
    limit: number;
  }): Promise<AttemptResult[]> {
    const now = this.clock.now();
    const claim = {
      now: new Date(now),
      limit: options.limit,
      leaseUntil: new Date(now + this.options.leaseMs),
      messageId: options.messageId ?? null,
    };
    const rows =
      options.tenant === undefined
        ? await this.statements.claim(this.sql, claim)
        : await this.statements.claimTenant(this.sql, { ...claim, tenant: options.tenant });
    return Promise.all(rows.map((row) => this.attempter.attempt(row)));
  }
}

/**
 * Creates a sender. See `WebhookSenderOptions`.
 *
 * @example
 * const sender = createWebhookSender({ sql: fromPg(pool) });
 * await sender.endpoints.create({ url: 'https://customer.example/hooks', eventTypes: ['invoice.paid'] });
 * await sql.transaction((tx) => sender.enqueue(tx, { id: invoiceId, type: 'invoice.paid', payload: invoice }));
 */
export function createWebhookSender<Client>(options: WebhookSenderOptions<Client>): WebhookSender<Client> {
  return new WebhookSender(options);
}
