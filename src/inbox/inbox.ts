import { parseJsonColumn } from '../core/json-column.js';
import { toMillis } from '../core/clock.js';
import { InvalidArgumentError } from '../core/errors.js';
import { deriveKey, validateName } from '../core/keys.js';
import type { Queryable, Transaction } from '../core/sql.js';
import { isTransactionRetryable } from '../core/sqlstate.js';
import { sweepInBatches, type SweepOptions, type SweepResult } from '../core/sweeper.js';
import { defaultTenant, validateTenant } from '../core/tenant.js';
import { TableModule, type StoreOptions } from '../core/store.js';
import { renderInboxStatements, type InboxStatements } from './statements.js';
import { causationFromHeaders, currentCausation, type Causation } from '../core/causation.js';
import { runInCause } from '../observability/caused-span.js';

const day = 86_400_000;

/** Options of `createInbox`. */
export interface InboxOptions<Client = unknown> extends StoreOptions<Client> {
  /**
   * How long a processed id is remembered. A redelivery after this is processed again, so choose
   * the longest of: broker redelivery, dead-letter redrive, operator replay, producer outbox
   * retention. Default 30 days.
   */
  retentionMs?: number;
  /** Whole-transaction retries of `handle` on serialization failure or deadlock. Default 3. */
  transactionRetries?: number;
  /**
   * The tenant of messages that name none (`message.tenant`). Default `''`, the default tenant:
   * for consumers that do not separate tenants. A consumer in a database distributed by tenant
   * (Citus) or split into cells names the tenant of each message, so its record lives beside the
   * tenant's other rows.
   */
  tenant?: string;
}

/** Names one delivery: who consumes it, and the message's id (an outbox event id, a delivery id). */
export interface InboxMessage {
  /** The consuming component, e.g. `billing`. Two consumers of one message each process it once. */
  consumer: string;
  /** The message's id as the producer set it; the same on every redelivery. */
  messageId: string;
  /**
   * The tenant the message belongs to (an outbox event's `tenant`). Ids are deduplicated per
   * (tenant, consumer). Default: the inbox's `tenant` option (`''` unless set).
   */
  tenant?: string;
  /**
   * The message's headers, for the cause they carry: `traceparent` and `idem-intent`, which idem
   * writes on every message it publishes. The record then names the producer's intent, and the
   * handler runs on its behalf in a span that continues the producer's trace. The broker consumers
   * pass them; pass them when you call the inbox yourself. Default none (the record names the
   * intent the caller runs in, if any).
   */
  headers?: Readonly<Record<string, unknown>>;
}

/** Passed to a handler beside its transaction. */
export interface InboxContext extends InboxMessage {
  /** A key for downstream calls derived from this message and `name`; the same on every redelivery. */
  deriveKey(name: string): string;
}

export type HandleResult<T> = { duplicate: false; value: T } | { duplicate: true };

/** A message recorded as dead, with what is needed to inspect or replay it. */
export interface DeadMessage extends InboxMessage {
  /** Deliveries attempted. */
  attempts: number;
  error: string;
  /** Where it came from: a queue, a subject. */
  origin?: string;
  payload?: Uint8Array;
  headers?: Record<string, string>;
}

export interface InboxRecord {
  tenant: string;
  consumer: string;
  messageId: string;
  state: 'processed' | 'dead';
  attempts: number;
  duplicates: number;
  lastError: string | null;
  origin: string | null;
  payload: Uint8Array | null;
  headers: Record<string, string> | null;
  processedAt: number;
  expiresAt: number;
}

/**
 * Processed-message records for consumers: a handler runs at most once per (tenant, consumer,
 * message id), because the record commits in the handler's own transaction.
 *
 * @example
 * const inbox = createInbox({ sql: fromPg(pool) });
 * const result = await inbox.handle({ consumer: 'billing', messageId: event.id }, async (tx) => {
 *   await tx.query('INSERT INTO invoices (order_id) VALUES ($1)', [event.payload.orderId]);
 * });
 * // result.duplicate is true for a redelivery: nothing ran; ack it.
 */
export class Inbox<Client = unknown> extends TableModule<Client, InboxStatements> {
  readonly retentionMs: number;
  private readonly transactionRetries: number;
  private readonly tenant: string;

  constructor(options: InboxOptions<Client>) {
    super(options, renderInboxStatements);
    this.retentionMs = options.retentionMs ?? 30 * day;
    if (!(this.retentionMs > 0)) throw new InvalidArgumentError('retentionMs must be positive');
    this.transactionRetries = options.transactionRetries ?? 3;
    this.tenant = options.tenant ?? defaultTenant;
    validateTenant(this.tenant);
  }

  /**
   * Runs `handler` once per (tenant, consumer, message id), in a transaction that also records the id.
   * A duplicate returns `{ duplicate: true }` without running it (an `inbox:duplicate` event; a
   * first delivery's commit is an `inbox:processed` event); a throw rolls
   * back both the record and the handler's writes, so a redelivery runs it again. Ack the
   * message only after this resolves.
   *
   * @example
   * const { duplicate } = await inbox.handle({ consumer: 'billing', messageId: message.id }, async (tx) => {
   *   await tx.query('INSERT INTO invoices (order_id) VALUES ($1)', [message.body.orderId]);
   * });
   * message.ack(); // a duplicate too: it was processed before
   */
  async handle<T>(
    message: InboxMessage,
    handler: (tx: Transaction<Client>, context: InboxContext) => Promise<T>,
  ): Promise<HandleResult<T>> {
    this.validate(message);
    return this.inCause(message, async () => {
      for (let attempt = 0; ; attempt++) {
        try {
          const result = await this.sql.transaction((tx) => this.run(tx, message, handler));
          this.count(message, result);
          return result;
        } catch (error) {
          if (attempt < this.transactionRetries && isTransactionRetryable(error)) continue;
          throw error;
        }
      }
    });
  }

  /**
   * Like `handle`, inside a transaction the caller already opened. If this throws, roll back.
   * On a duplicate the caller's transaction has written nothing of idem's but the duplicate count.
   *
   * @example
   * await sql.transaction(async (tx) => {
   *   await inbox.handleIn(tx, { consumer: 'billing', messageId: message.id }, async (tx) => {
   *     await tx.query('INSERT INTO invoices (order_id) VALUES ($1)', [message.body.orderId]);
   *   });
   * });
   */
  async handleIn<T, TxClient>(
    tx: Transaction<TxClient>,
    message: InboxMessage,
    handler: (tx: Transaction<TxClient>, context: InboxContext) => Promise<T>,
  ): Promise<HandleResult<T>> {
    this.validate(message);
    return this.inCause(message, async () => {
      const result = await this.run(tx, message, handler);
      this.count(message, result);
      return result;
    });
  }

  /** Runs `work` on behalf of the cause `message`'s headers name, in a span of the producer's trace. */
  private inCause<R>(message: InboxMessage, work: () => Promise<R>): Promise<R> {
    const attributes = { 'idem.consumer': message.consumer, 'messaging.message.id': message.messageId };
    return runInCause('idem.inbox.handle', causeOf(message), attributes, work);
  }

  /**
   * Records the id in `tx` and says whether this is the first time (true) or a duplicate (false).
   * For code that runs its own transaction and handler: write your effects only when it is true.
   */
  async record(tx: Queryable, message: InboxMessage): Promise<boolean> {
    this.validate(message);
    const now = this.clock.now();
    // Inside `handle` the current causation is the message's; a caller of `record` alone may only
    // have passed the headers.
    const current = currentCausation();
    const cause = message.headers ? causeOf(message) : current;
    const record = {
      tenant: this.tenantOf(message),
      consumer: message.consumer,
      messageId: message.messageId,
      now: new Date(now),
      expiresAt: new Date(now + this.retentionMs),
      intent: cause.intent ?? current.intent,
      traceparent: current.traceparent ?? cause.traceparent,
    };
    const { statements } = this;
    if ((await statements.record(tx, record)) === 1) return true;
    // Rare paths, after the unique key said "seen": a dead record is revived by a redelivery
    // (the handler runs again), anything else is a duplicate.
    if ((await statements.revive(tx, record)) === 1) return true;
    await statements.countDuplicate(tx, record);
    return false;
  }

  /**
   * Records a message the consumer gave up on (its own statement, outside any handler
   * transaction). A later delivery of the same id runs the handler again. Never overwrites a
   * processed record. Returns false when the message had been processed after all.
   */
  async markDead(message: DeadMessage): Promise<boolean> {
    this.validate(message);
    const now = this.clock.now();
    const marked = await this.statements.markDead(this.sql, {
      tenant: this.tenantOf(message),
      consumer: message.consumer,
      messageId: message.messageId,
      attempts: message.attempts,
      error: message.error,
      origin: message.origin ?? null,
      payload: message.payload ? Buffer.from(message.payload) : null,
      headers: message.headers ? JSON.stringify(message.headers) : null,
      now: new Date(now),
      expiresAt: new Date(now + this.retentionMs),
    });
    return marked === 1;
  }

  /** One record, or null. */
  async get(message: InboxMessage): Promise<InboxRecord | null> {
    this.validate(message);
    const r = await this.statements.read(this.sql, {
      tenant: this.tenantOf(message),
      consumer: message.consumer,
      messageId: message.messageId,
    });
    if (!r) return null;
    return {
      tenant: r.tenant_id as string,
      consumer: r.consumer as string,
      messageId: r.message_id as string,
      state: r.state as InboxRecord['state'],
      attempts: Number(r.attempts),
      duplicates: Number(r.duplicates),
      lastError: (r.last_error as string | null) ?? null,
      origin: (r.origin as string | null) ?? null,
      payload: (r.payload as Uint8Array | null) ?? null,
      headers: parseJsonColumn(r.headers) as Record<string, string> | null,
      processedAt: toMillis(r.processed_at)!,
      expiresAt: toMillis(r.expires_at)!,
    };
  }

  /** Counts in the table (all consumers, or one). */
  async stats(consumer?: string): Promise<{ processed: number; dead: number; duplicates: number }> {
    const r = (await this.statements.stats(this.sql, { consumer: consumer ?? null })) ?? {};
    return {
      processed: Number(r.processed ?? 0),
      dead: Number(r.dead ?? 0),
      duplicates: Number(r.duplicates ?? 0),
    };
  }

  /**
   * Deletes records past their retention in short batches (see `SweepOptions`). `tenants` sweeps
   * only those tenants' records, each batch pinned to one tenant (a sweeper per shard or per cell).
   */
  async sweep(options: SweepOptions = {}): Promise<SweepResult> {
    const now = () => new Date(this.clock.now());
    return sweepInBatches(
      this.sql,
      this.clock,
      [{ statement: this.statements.sweep, tenantStatement: this.statements.sweepTenant, cutoff: now }],
      options,
    );
  }

  private async run<T, TxClient>(
    tx: Transaction<TxClient>,
    message: InboxMessage,
    handler: (tx: Transaction<TxClient>, context: InboxContext) => Promise<T>,
  ): Promise<HandleResult<T>> {
    if (!(await this.record(tx, message))) return { duplicate: true };
    const tenant = this.tenantOf(message);
    // The default tenant keeps the derivation keys had before tenants existed (the same message
    // must send the same key downstream after an upgrade); any other tenant is part of the key.
    const derive =
      tenant === defaultTenant
        ? (name: string) =>
            deriveKey({ tenant: message.consumer, operation: 'inbox', key: message.messageId }, name)
        : (name: string) =>
            deriveKey({ tenant, operation: 'inbox', key: message.messageId }, message.consumer, name);
    const value = await handler(tx, { ...message, tenant, deriveKey: derive });
    return { duplicate: false, value };
  }

  private tenantOf(message: InboxMessage): string {
    return message.tenant ?? this.tenant;
  }

  private validate(message: InboxMessage): void {
    validateMessage(message);
  }

  /** Reports what `handle`/`handleIn` did (a listener's throw is the channel's: it changes nothing). */
  private count(message: InboxMessage, result: HandleResult<unknown>): void {
    const name = result.duplicate ? 'inbox:duplicate' : 'inbox:processed';
    if (!this.events.has(name)) return;
    this.events.emit(name, {
      tenant: this.tenantOf(message),
      consumer: message.consumer,
      messageId: message.messageId,
    });
  }
}

/**
 * Creates an inbox for one database and schema. See `InboxOptions` for the defaults.
 *
 * @example
 * const inbox = createInbox({ sql: fromPg(pool), retentionMs: 14 * 86_400_000 });
 */
export function createInbox<Client>(options: InboxOptions<Client>): Inbox<Client> {
  return new Inbox(options);
}

/** The cause a message's headers name (`core/causation.ts`); none without headers. */
function causeOf(message: InboxMessage): Causation {
  return causationFromHeaders(message.headers);
}

function validateMessage(message: InboxMessage): void {
  validateName('consumer', message.consumer);
  if (message.tenant !== undefined) validateTenant(message.tenant);
  if (
    typeof message.messageId !== 'string' ||
    message.messageId.length === 0 ||
    message.messageId.length > 512
  ) {
    throw new InvalidArgumentError('messageId must be 1–512 characters');
  }
}

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /**
     * A message's handler ran and its record was written: after the commit in `handle` (the broker
     * consumers' and the in-database publisher's deliveries included), when the handler returned in
     * `handleIn` (the caller's transaction may still roll back).
     */
    'inbox:processed': { tenant: string; consumer: string; messageId: string };
    /**
     * `handle` or `handleIn` answered a message processed before without running its handler (a
     * redelivery): the event for metrics (`metrics.inboxDuplicate` of `idem/metrics`).
     */
    'inbox:duplicate': { tenant: string; consumer: string; messageId: string };
  }
}
