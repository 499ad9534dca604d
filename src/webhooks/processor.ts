/**
 * Workers that process stored receipts after the answer was sent. Each receipt is claimed with
 * `FOR UPDATE SKIP LOCKED`, then handled in one transaction that also records its entity's version
 * and marks it applied: the handler's writes, the version and the receipt's state commit together
 * or not at all. Failures retry with backoff until a dead letter; dead and unhandled receipts can
 * be redriven.
 *
 * Order-aware handling is chosen per event type: `state` (latest wins), `sequence` (every version,
 * in order; a gap waits, then parks its entity visibly) or `none`. `WebhookHandler.ordering` says
 * what each does. Nothing is ever skipped silently.
 *
 * One entity is handled by one worker at a time, across processes: its row in
 * `webhook_entity_versions` is locked with SKIP LOCKED, and when another worker holds it the
 * receipt goes back to `waiting` (woken when that worker commits) instead of blocking a worker.
 * Different entities proceed in parallel.
 */
import { parseJsonColumn } from '../core/json-column.js';
import { toMillis } from '../core/clock.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { Transaction } from '../core/sql.js';
import type { SweepOptions, SweepResult } from '../core/sweeper.js';
import { defaultTenant, validateTenant, validateTenants } from '../core/tenant.js';
import { positiveInteger } from '../core/validate.js';
import { drainRounds, PollingWorker } from '../core/worker/polling-worker.js';
import { TableModule, type StoreOptions } from '../core/store.js';
import { createBackoff, type BackoffOptions } from '../core/resilience/backoff.js';
import {
  listParkedEntities,
  skipEntityGap,
  type ParkedEntity,
  type SkipOptions,
  type SkipResult,
} from './entities.js';
import { discardReceipt, type DiscardOptions, type DiscardResult } from './discard.js';
import { InvalidWebhookEventError, isInvalidWebhookEvent } from './errors.js';
import { createEvent, type WebhookEvent } from './event.js';
import { errorMessage } from './error-message.js';
import { receiptStatements, type ReceiptStatements } from './statements.js';
import { sweepReceipts } from './sweep.js';

/**
 * An entity and the version of it that an event carries. How versions are compared depends on the
 * handler's `ordering`: see `WebhookHandler.ordering`.
 */
export interface EntityVersion {
  /** The entity, e.g. a customer or charge id. */
  key: string;
  /**
   * A number that only grows with the entity's changes. `state`: a sequence number or a timestamp
   * (a `Date`, an ISO string or epoch milliseconds); it must tell two different events apart, since
   * the same version again is a duplicate. `sequence`: a non-negative integer that grows by exactly
   * one per change (the provider's per-entity sequence). Numeric strings keep their full precision.
   */
  version: number | bigint | string | Date;
  /** Entities of one scope compare versions with each other. Default: the receipt's source. */
  scope?: string;
}

/** How events of one type are ordered against the other events of their entity. */
export type WebhookOrdering = 'state' | 'sequence' | 'none';

/** Handles one event type of one source. */
export interface WebhookHandler<Client = unknown> {
  /**
   * How this event type is ordered. Default: `state` when `entity` is given, `none` otherwise.
   * - `state` (latest wins), for events that carry the entity's state: an event older than the
   *   applied version is recorded `superseded`, never handled; the same entity and version again,
   *   whatever its delivery id, is a `duplicate`. A version far ahead becomes the new truth:
   *   `validate` it if a sender could get it wrong.
   * - `sequence` (every version, in order), for events that carry a change (an amount refunded, a
   *   line added): version n is handled only once n-1 was, one at a time across every worker and
   *   process. A later version waits for the missing one (never handled before it) for up to
   *   `gapTimeoutMs`, then the entity is parked with a visible reason (console, metric,
   *   `idem webhooks parked`) until the gap is filled or an operator skips it. A version far ahead
   *   is a gap, not the new truth.
   * - `none`: not about one entity; each delivery is handled once (deduplicated on its delivery
   *   id), in no particular order.
   *
   * Event types that share entities (scope and key) must share the model: an event whose entity
   * was first seen under the other model is dead-lettered with the reason.
   */
  ordering?: WebhookOrdering;
  /**
   * Declares the entity and version this event is about. Required for `state` and `sequence`. For
   * `state`, returning `undefined` handles this event without ordering; for `sequence` it makes the
   * event invalid. A throw (a body that does not parse) makes the event invalid: dead at once.
   */
  entity?(event: WebhookEvent): EntityVersion | null | undefined;
  /**
   * Checks the event before anything takes effect, outside the transaction: return a reason to
   * refuse it (a dead letter at once, never retried, never handled, the entity untouched), or
   * nothing to accept it. For checks that need the database (more than is left to refund), throw
   * `InvalidWebhookEventError` from `handle`: its transaction rolls back. Default: every event is valid.
   */
  validate?(event: WebhookEvent): string | null | undefined | Promise<string | null | undefined>;
  /**
   * `sequence` only: the version of an entity's first event (nothing applied yet). Default 1. An
   * entity whose first event arrives with a higher version waits for the missing ones, then parks.
   */
  firstVersion?: number | bigint | string;
  /**
   * `sequence` only: how long a later version waits for a missing one, in ms, counted from when it
   * was first seen waiting or from the entity's last progress, whichever is later; then the entity
   * parks. Default: the processor's `gapTimeoutMs`. The missing version is applied whenever it comes,
   * parked or not: parking only makes the wait visible.
   */
  gapTimeoutMs?: number;
  /**
   * Applies the event through `tx`; idem commits it with the entity version and the receipt's state.
   *
   * @example
   * handle: async (tx, event) => {
   *   const { id, status } = event.json<{ id: string; status: string }>();
   *   await tx.query('UPDATE refunds SET status = $2 WHERE id = $1', [id, status]);
   * },
   */
  handle(tx: Transaction<Client>, event: WebhookEvent): Promise<void>;
}

/** `handlers[source][eventType]`; `'*'` catches every type of a source (and receipts with no type). */
export type WebhookHandlers<Client = unknown> = Record<
  string,
  Record<string, WebhookHandler<Client> | ((tx: Transaction<Client>, event: WebhookEvent) => Promise<void>)>
>;

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

/**
 * What happened to one claimed receipt: `applied`; `superseded` (state: older than the applied
 * version); `duplicate` (this entity and version were handled already); `waiting` (sequence: an
 * earlier version is missing); `parked` (sequence: waiting past the gap timeout); `deferred` (its
 * entity was busy with another worker); `invalid` (refused by the handler: dead letter);
 * `unhandled`; `retry`; `dead`; `lost` (another worker took the claim over).
 */
export type ProcessOutcome =
  | 'applied'
  | 'superseded'
  | 'duplicate'
  | 'waiting'
  | 'parked'
  | 'deferred'
  | 'invalid'
  | 'unhandled'
  | 'retry'
  | 'dead'
  | 'lost';

/** A receipt as stored. */
export interface WebhookReceipt {
  /** The tenant of the source that received it (`''`: the default tenant). */
  tenant: string;
  source: string;
  deliveryId: string;
  eventType: string | null;
  headers: Record<string, string>;
  body: Uint8Array;
  /** Epoch ms, as every time in idem's records. */
  receivedAt: number;
  state: 'pending' | 'processing' | 'waiting' | 'applied' | 'superseded' | 'duplicate' | 'unhandled' | 'dead';
  /** Handler attempts (claims that only put the receipt back to wait are not counted). */
  attempts: number;
  /** Claims that put the receipt back to wait for its entity. */
  deferrals: number;
  /** When it is due; `null` while its entity is parked (not scheduled until the gap is filled or skipped). */
  nextAttemptAt: number | null;
  lastError: string | null;
  entityScope: string | null;
  entityKey: string | null;
  entityVersion: string | null;
  /** When this sequence event was first seen waiting for an earlier version. */
  waitingSince: number | null;
  processedAt: number | null;
  expiresAt: number;
}

/** The receipt an event of the processor is about, and the attempt that ended. */
export interface WebhookReceiptRef {
  /** The tenant of the source that received it (`''`: the default tenant). */
  tenant: string;
  source: string;
  deliveryId: string;
  eventType: string | null;
  /** The handler attempt this claim was (waits for an entity are not counted). */
  attempt: number;
}

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /**
     * A claimed receipt ended without a failure and without an event of its own below: `applied`
     * (its handler's writes committed), `duplicate` (this entity and version, or this delivery,
     * were handled already), `unhandled` (no handler for its type), `waiting` (sequence: an
     * earlier version is missing), `deferred` (its entity was busy with another worker), `parked`
     * (waiting behind an entity parked before), `lost` (another worker took the claim over).
     */
    'webhook:processed': WebhookReceiptRef & {
      outcome: 'applied' | 'duplicate' | 'unhandled' | 'waiting' | 'deferred' | 'parked' | 'lost';
    };
    /** A receipt's handler (or the database) failed; it is retried at `nextAttemptAt` (epoch ms). */
    'webhook:retried': WebhookReceiptRef & { error: string; nextAttemptAt: number };
    /**
     * A receipt became a dead letter: its attempts ran out, its error is not retryable, or the event
     * was refused as invalid (`invalid`: by `validate`, `InvalidWebhookEventError`, or an entity
     * that cannot be ordered). `redrive` brings it back.
     */
    'webhook:dead': WebhookReceiptRef & { error: string; invalid: boolean };
    /** A `state` event older than its entity's applied version: recorded, never handled. */
    'webhook:superseded': WebhookReceiptRef & { entity: { scope: string; key: string; version: string } };
    /**
     * A `sequence` entity was parked: this receipt's version waited past the gap timeout for
     * version `expected`. Once per park; later receipts of the entity wait behind it
     * (`webhook:processed`, outcome `parked`) until the gap is filled or skipped.
     */
    'webhook:parked': WebhookReceiptRef & {
      entity: { scope: string; key: string; version: string };
      expected: string;
      reason: string;
    };
    /** An operator's `redrive` put `count` (at least one) dead or unhandled receipts back to pending. */
    'webhook:redriven': {
      count: number;
      states: readonly ('dead' | 'unhandled')[];
      source?: string;
      tenant?: string;
    };
    /** An operator's `discard` made a pending or waiting receipt a dead letter. */
    'webhook:discarded': {
      tenant: string;
      source: string;
      deliveryId: string;
      from: 'pending' | 'waiting';
      unparked: boolean;
      reason?: string;
    };
    /** An operator's `skip` skipped versions `from`–`through` of a sequence entity and resumed it. */
    'webhook:gap-skipped': {
      tenant: string;
      scope: string;
      key: string;
      from: string;
      through: string;
      reason?: string;
    };
  }
}

/** Selects receipts to redrive. */
export interface RedriveOptions {
  /** Only this source. Default: every source. */
  source?: string;
  /** Only these delivery ids. Default: every receipt in `states`. */
  deliveryIds?: string[];
  /** Which states to redrive. Default `['dead']`; `'unhandled'` once a handler for the type exists. */
  states?: ('dead' | 'unhandled')[];
  /** Only this tenant's receipts (one statement pinned to it). Default: every tenant. */
  tenant?: string;
}

interface ClaimedRow {
  tenant_id: string;
  source: string;
  delivery_id: string;
  event_type: string | null;
  headers: Record<string, string> | string;
  body: Uint8Array;
  received_at: unknown;
  attempts: number;
  deferrals: number;
  waiting_since: unknown;
}

interface LockedEntity {
  ordering: 'state' | 'sequence';
  version: string | null;
  expected: string | null;
  versus_applied: number | null;
  versus_expected: number | null;
  applied_at: unknown;
  parked_at: unknown;
}

/** A handler with its defaults resolved. */
interface ResolvedHandler<Client> {
  ordering: WebhookOrdering;
  entity?: (event: WebhookEvent) => EntityVersion | null | undefined;
  validate?: WebhookHandler<Client>['validate'];
  firstVersion: string;
  gapTimeoutMs: number | undefined;
  handle(tx: Transaction<Client>, event: WebhookEvent): Promise<void>;
}

/** The entity an event declared, normalised, with its handler's model. */
interface DeclaredEntity {
  scope: string;
  key: string;
  version: string;
  ordering: 'state' | 'sequence';
}

/** Processes receipts. `start()` runs workers; `runOnce()` and `drain()` drive it by hand (tests, cron). */
export class WebhookProcessor<Client = unknown> extends TableModule<Client, ReceiptStatements> {
  private readonly handlers = new Map<string, Map<string, ResolvedHandler<Client>>>();
  private readonly concurrency: number;
  private readonly pollIntervalMs: number;
  private readonly leaseMs: number;
  private readonly maxAttempts: number;
  private readonly gapTimeoutMs: number;
  private readonly entityBusyRetryMs: number;
  private readonly random: () => number;
  private readonly delay: (failures: number) => number;
  private readonly tenants: readonly string[] | undefined;
  /** Where the next claim of a processor scoped to tenants starts, so each gets its turn. */
  private nextTenant = 0;
  private readonly worker: PollingWorker;

  constructor(options: WebhookProcessorOptions<Client>) {
    super(options, receiptStatements);
    this.concurrency = positiveInteger('concurrency', options.concurrency ?? 4);
    this.pollIntervalMs = positiveInteger('pollIntervalMs', options.pollIntervalMs ?? 1000);
    this.leaseMs = positiveInteger('leaseMs', options.leaseMs ?? 60_000);
    this.maxAttempts = positiveInteger('maxAttempts', options.maxAttempts ?? 12);
    this.gapTimeoutMs = positiveInteger('gapTimeoutMs', options.gapTimeoutMs ?? 900_000);
    this.entityBusyRetryMs = positiveInteger('entityBusyRetryMs', options.entityBusyRetryMs ?? 500);
    this.random = options.random ?? Math.random;
    this.delay = createBackoff(options.backoff, processorBackoff, this.random);
    this.tenants = validateTenants(options.tenants);
    this.worker = new PollingWorker({
      concurrency: this.concurrency,
      clock: this.clock,
      pollIntervalMs: () => this.pollIntervalMs,
      onError: (error) => this.events.emit('error', { source: 'webhook-processor', where: 'batch', error }),
      // One receipt per round and loop, so `concurrency` loops handle that many at once.
      round: async () => ({ idleMs: (await this.runOnce(1)).length > 0 ? 0 : this.pollIntervalMs }),
    });
    for (const [source, byType] of Object.entries(options.handlers)) {
      const resolved = new Map<string, ResolvedHandler<Client>>();
      for (const [type, given] of Object.entries(byType)) {
        resolved.set(type, resolveHandler(`${source}/${type}`, given));
      }
      this.handlers.set(source, resolved);
    }
  }

  /** Starts `concurrency` workers; resolves once they run. Idempotent. */
  async start(): Promise<void> {
    await this.worker.start();
  }

  /** Stops the workers: idle ones at once, busy ones after their current receipt. */
  async stop(): Promise<void> {
    await this.worker.stop();
  }

  /** Wakes idle workers now (call it on the receiver's `webhook:received`). */
  notify(): void {
    this.worker.notify();
  }

  /**
   * Claims up to `limit` due receipts and processes them concurrently. Returns their outcomes.
   * With `tenants`, claims tenant by tenant (each claim pinned to one) until `limit` is reached,
   * starting one tenant further each call.
   */
  async runOnce(limit = this.concurrency): Promise<ProcessOutcome[]> {
    return Promise.all((await this.claim(limit)).map((row) => this.process(row)));
  }

  private async claim(limit: number): Promise<ClaimedRow[]> {
    const now = this.clock.now();
    const params = [new Date(now), limit, new Date(now + this.leaseMs)];
    if (!this.tenants) {
      const { rows } = await this.sql.query<ClaimedRow & Record<string, unknown>>(
        this.statements.claim,
        params,
        this.statements.names.claim,
      );
      return rows;
    }
    const claimed: ClaimedRow[] = [];
    const start = this.nextTenant++ % this.tenants.length;
    for (let i = 0; i < this.tenants.length && claimed.length < limit; i++) {
      const tenant = this.tenants[(start + i) % this.tenants.length]!;
      params[1] = limit - claimed.length;
      const { rows } = await this.sql.query<ClaimedRow & Record<string, unknown>>(
        this.statements.claimTenant,
        [...params, tenant],
        this.statements.names.claimTenant,
      );
      claimed.push(...rows);
    }
    return claimed;
  }

  /**
   * Processes until no receipt is due (retries and waits scheduled later stay for later). Bounded
   * by `maxRounds` batches. Returns the outcomes, in order of processing.
   */
  async drain(options: { limit?: number; maxRounds?: number } = {}): Promise<ProcessOutcome[]> {
    return drainRounds(() => this.runOnce(options.limit ?? this.concurrency), options.maxRounds);
  }

  /** Puts dead (or unhandled) receipts back to pending with fresh attempts. Returns how many. */
  async redrive(options: RedriveOptions = {}): Promise<number> {
    const states = options.states ?? ['dead'];
    for (const state of states) {
      if (state !== 'dead' && state !== 'unhandled')
        throw new InvalidArgumentError(`cannot redrive ${String(state)} receipts`);
    }
    const params = [new Date(this.clock.now()), states, options.source ?? null, options.deliveryIds ?? null];
    if (options.tenant !== undefined) validateTenant(options.tenant);
    const { rowCount } =
      options.tenant === undefined
        ? await this.sql.query(this.statements.redrive, params)
        : await this.sql.query(this.statements.redriveTenant, [...params, options.tenant]);
    if (rowCount > 0) {
      this.events.emit('webhook:redriven', {
        count: rowCount,
        states,
        ...(options.source !== undefined ? { source: options.source } : {}),
        ...(options.tenant !== undefined ? { tenant: options.tenant } : {}),
      });
      this.notify();
    }
    return rowCount;
  }

  /** Lists receipts in the given states (default: dead letters), oldest first; of one tenant or all. */
  async listReceipts(
    options: { states?: WebhookReceipt['state'][]; source?: string; limit?: number; tenant?: string } = {},
  ): Promise<WebhookReceipt[]> {
    if (options.tenant !== undefined) validateTenant(options.tenant);
    const { rows } = await this.sql.query(this.statements.list, [
      options.states ?? ['dead'],
      options.source ?? null,
      options.limit ?? 100,
      options.tenant ?? null,
    ]);
    return rows.map(decodeReceipt);
  }

  /** Sequence entities parked on a gap, oldest first, with what waits behind each gap. */
  listParked(options: { scope?: string; limit?: number; tenant?: string } = {}): Promise<ParkedEntity[]> {
    return listParkedEntities(this.sql, { schema: this.schema, ...options });
  }

  /**
   * Makes one pending or waiting receipt a dead letter (an operator's decision: it is never
   * handled; `redrive` brings it back), unparking its entity when nothing else waits there. See
   * `idem webhooks discard`.
   */
  async discard(options: DiscardOptions): Promise<DiscardResult> {
    const result = await discardReceipt(this.sql, { schema: this.schema, clock: this.clock, ...options });
    this.events.emit('webhook:discarded', {
      tenant: options.tenant ?? defaultTenant,
      source: options.source,
      deliveryId: options.deliveryId,
      from: result.from,
      unparked: result.unparked,
      ...(options.reason !== undefined ? { reason: options.reason } : {}),
    });
    return result;
  }

  /**
   * Skips the missing versions of a sequence entity (an operator's decision: they will never be
   * applied) and resumes it (`idem webhooks skip`).
   */
  async skip(options: SkipOptions): Promise<SkipResult> {
    const result = await skipEntityGap(this.sql, { schema: this.schema, clock: this.clock, ...options });
    this.events.emit('webhook:gap-skipped', {
      tenant: options.tenant ?? defaultTenant,
      scope: options.scope,
      key: options.key,
      from: result.from,
      through: result.through,
      ...(options.reason !== undefined ? { reason: options.reason } : {}),
    });
    this.notify();
    return result;
  }

  /**
   * Deletes applied, superseded, duplicate and unhandled receipts past their retention: see
   * `idem sweep`. `tenants` defaults to the processor's.
   */
  sweep(options: SweepOptions = {}): Promise<SweepResult> {
    return sweepReceipts(this.sql, {
      schema: this.schema,
      clock: this.clock,
      ...(this.tenants ? { tenants: this.tenants } : {}),
      ...options,
    });
  }

  private handlerFor(source: string, type: string | null): ResolvedHandler<Client> | undefined {
    const bySource = this.handlers.get(source);
    if (!bySource) return undefined;
    return (type !== null ? bySource.get(type) : undefined) ?? bySource.get('*');
  }

  private async process(row: ClaimedRow): Promise<ProcessOutcome> {
    const attempt = row.attempts - row.deferrals;
    const event = createEvent({
      tenant: row.tenant_id,
      source: row.source,
      deliveryId: row.delivery_id,
      type: row.event_type,
      headers: parseJsonColumn(row.headers) as Record<string, string>,
      body: row.body,
      receivedAt: toMillis(row.received_at)!,
      attempt,
    });
    const fields: WebhookReceiptRef = {
      tenant: row.tenant_id,
      source: row.source,
      deliveryId: row.delivery_id,
      eventType: row.event_type,
      attempt,
    };
    if (attempt > this.maxAttempts) {
      // Only after crashes: each claim counted an attempt that never reported back.
      const message = 'attempts exhausted: the workers that claimed this receipt never finished';
      await this.fail(row, true, message);
      this.events.emit('webhook:dead', { ...fields, error: message, invalid: false });
      return 'dead';
    }
    const handler = this.handlerFor(row.source, row.event_type);

    // What the event is about, and whether it may take effect at all: checked before any lock.
    let entity: DeclaredEntity | null = null;
    if (handler) {
      try {
        entity = declaredEntity(handler, event, row.source);
      } catch (error) {
        // A body that does not parse, or a version that cannot be ordered: invalid, not retried.
        const reason = error instanceof Error ? error.message : String(error);
        return this.refuse(row, null, reason.slice(0, 2000), fields);
      }
      let refusal: string | null | undefined;
      try {
        refusal = await handler.validate?.(event);
      } catch (error) {
        return this.failed(row, error, fields);
      }
      if (refusal) return this.refuse(row, entity, refusal, fields);
    }

    let woken = 0;
    /** Set when this receipt parked its entity (the event goes out after the commit). */
    let parked: { expected: string; reason: string } | undefined;
    try {
      if (entity) {
        await this.sql.query(
          this.statements.ensureEntity,
          [entity.scope, entity.key, entity.ordering, row.tenant_id],
          this.statements.names.ensureEntity,
        );
      }
      const outcome = await this.sql.transaction(async (tx): Promise<ProcessOutcome> => {
        parked = undefined;
        const locked = await tx.query(
          this.statements.lock,
          [row.source, row.delivery_id, row.attempts, row.tenant_id],
          this.statements.names.lock,
        );
        if (locked.rowCount === 0) return 'lost';
        if (!handler) {
          await this.finish(tx, row, 'unhandled', null);
          return 'unhandled';
        }
        if (!entity) {
          await handler.handle(tx, event);
          await this.finish(tx, row, 'applied', null);
          return 'applied';
        }
        const current = (
          await tx.query<LockedEntity & Record<string, unknown>>(
            this.statements.lockEntity,
            [entity.scope, entity.key, entity.version, handler.firstVersion, row.tenant_id],
            this.statements.names.lockEntity,
          )
        ).rows[0];
        if (!current) {
          // Another worker is handling this entity: wait for it, without holding this worker.
          const retryMs = this.entityBusyRetryMs * (0.5 + this.random() / 2);
          await this.wait(tx, row, entity, new Date(this.clock.now() + retryMs), row.waiting_since);
          return 'deferred';
        }
        if (current.ordering !== entity.ordering) {
          throw new InvalidWebhookEventError(
            `entity ${entity.scope}/${entity.key} is ordered by ${current.ordering}; this event type declares ${entity.ordering}`,
          );
        }
        const apply = async (wakeThrough: string | null) => {
          await handler.handle(tx, event);
          // After the handler, just before COMMIT: see ensureEntity for why the write comes last.
          woken = (
            await tx.query(
              this.statements.applyVersion,
              [
                entity.scope,
                entity.key,
                entity.version,
                row.source,
                row.delivery_id,
                new Date(this.clock.now()),
                wakeThrough,
                row.tenant_id,
              ],
              this.statements.names.applyVersion,
            )
          ).rowCount;
          await this.finish(tx, row, 'applied', entity);
          return 'applied' as const;
        };
        if (entity.ordering === 'state') {
          if (current.versus_applied === null || current.versus_applied > 0) return apply(null);
          const outcome = current.versus_applied < 0 ? 'superseded' : 'duplicate';
          await this.finish(tx, row, outcome, entity);
          return outcome;
        }
        if (current.versus_expected === 0) return apply((BigInt(entity.version) + 1n).toString());
        if (current.versus_expected! < 0) {
          const skipped = (
            await tx.query<{
              from_version: string;
              through_version: string;
              skipped_at: unknown;
              reason: string | null;
            }>(
              this.statements.skipCovering,
              [entity.scope, entity.key, entity.version, row.tenant_id],
              this.statements.names.skipCovering,
            )
          ).rows[0];
          if (skipped) {
            throw new InvalidWebhookEventError(
              `version ${entity.version} of ${entity.scope}/${entity.key} arrived after an operator skipped versions ${skipped.from_version}–${skipped.through_version} at ${new Date(toMillis(skipped.skipped_at)!).toISOString()}${skipped.reason ? ` (${skipped.reason})` : ''}: never applied`,
            );
          }
          if (current.version === null) {
            throw new InvalidWebhookEventError(
              `version ${entity.version} of ${entity.scope}/${entity.key} is below the handler's first version ${handler.firstVersion}`,
            );
          }
          await this.finish(tx, row, 'duplicate', entity);
          return 'duplicate';
        }
        const gap = await this.awaitGap(tx, row, entity, current, handler);
        parked = gap.parked;
        return gap.outcome;
      });
      if (woken > 0) this.notify();
      this.settled(fields, entity, outcome, parked);
      return outcome;
    } catch (error) {
      if (isInvalidWebhookEvent(error)) return this.refuse(row, entity, error.reason, fields);
      return this.failed(row, error, fields);
    }
  }

  /**
   * A sequence event ahead of the next expected version: it waits until the gap's deadline (or
   * until the missing version wakes it); past the deadline the entity parks and every later
   * version waits, not scheduled, until the gap is filled or skipped.
   */
  private async awaitGap(
    tx: Transaction<Client>,
    row: ClaimedRow,
    entity: DeclaredEntity,
    current: LockedEntity,
    handler: ResolvedHandler<Client>,
  ): Promise<{ outcome: 'waiting' | 'parked'; parked?: { expected: string; reason: string } }> {
    const now = this.clock.now();
    const waitingSince = toMillis(row.waiting_since) ?? now;
    const progressedAt = toMillis(current.applied_at) ?? waitingSince;
    const timeoutMs = handler.gapTimeoutMs ?? this.gapTimeoutMs;
    const deadline = Math.max(waitingSince, progressedAt) + timeoutMs;
    if (current.parked_at === null && now < deadline) {
      await this.wait(tx, row, entity, new Date(deadline), new Date(waitingSince));
      return { outcome: 'waiting' };
    }
    let parked: { expected: string; reason: string } | undefined;
    if (current.parked_at === null) {
      const reason = `version ${current.expected} has not arrived; version ${entity.version} (delivery ${row.delivery_id}) waited ${Math.round((now - Math.max(waitingSince, progressedAt)) / 1000)} s for it (gap timeout ${timeoutMs} ms)`;
      await tx.query(
        this.statements.park,
        [entity.scope, entity.key, new Date(now), reason, current.expected, row.tenant_id],
        this.statements.names.park,
      );
      parked = { expected: current.expected!, reason };
    }
    await this.wait(tx, row, entity, 'infinity', new Date(waitingSince));
    return parked ? { outcome: 'parked', parked } : { outcome: 'parked' };
  }

  /** Reports a receipt that ended without a failure, once its transaction committed. */
  private settled(
    fields: WebhookReceiptRef,
    entity: DeclaredEntity | null,
    outcome: ProcessOutcome,
    parked: { expected: string; reason: string } | undefined,
  ): void {
    const about = entity && { scope: entity.scope, key: entity.key, version: entity.version };
    if (outcome === 'superseded' && about)
      this.events.emit('webhook:superseded', { ...fields, entity: about });
    else if (parked && about) this.events.emit('webhook:parked', { ...fields, entity: about, ...parked });
    else if (outcome !== 'superseded' && outcome !== 'invalid' && outcome !== 'retry' && outcome !== 'dead')
      this.events.emit('webhook:processed', { ...fields, outcome });
  }

  private async wait(
    tx: Transaction<Client>,
    row: ClaimedRow,
    entity: DeclaredEntity,
    until: Date | 'infinity',
    waitingSince: unknown,
  ): Promise<void> {
    await tx.query(
      this.statements.wait,
      [
        row.source,
        row.delivery_id,
        row.attempts,
        until,
        entity.scope,
        entity.key,
        entity.version,
        waitingSince ?? null,
        row.tenant_id,
      ],
      this.statements.names.wait,
    );
  }

  private async finish(
    tx: Transaction<Client>,
    row: ClaimedRow,
    state: 'applied' | 'superseded' | 'duplicate' | 'unhandled',
    entity: { scope: string; key: string; version: string } | null,
  ): Promise<void> {
    await tx.query(
      this.statements.finish,
      [
        row.source,
        row.delivery_id,
        row.attempts,
        state,
        new Date(this.clock.now()),
        null,
        ...entityParams(entity),
        row.tenant_id,
      ],
      this.statements.names.finish,
    );
  }

  /** An invalid event: dead at once with the reason, nothing of it applied. */
  private async refuse(
    row: ClaimedRow,
    entity: DeclaredEntity | null,
    reason: string,
    fields: WebhookReceiptRef,
  ): Promise<ProcessOutcome> {
    const message = `invalid event: ${reason}`;
    await this.sql.query(
      this.statements.reject,
      [
        row.source,
        row.delivery_id,
        row.attempts,
        new Date(this.clock.now()),
        message,
        ...entityParams(entity),
        row.tenant_id,
      ],
      this.statements.names.reject,
    );
    this.events.emit('webhook:dead', { ...fields, error: message, invalid: true });
    return 'invalid';
  }

  /** The handler (or the database) failed: retry with backoff, or dead. */
  private async failed(row: ClaimedRow, error: unknown, fields: WebhookReceiptRef): Promise<ProcessOutcome> {
    const permanent = (error as { retryable?: unknown } | null)?.retryable === false;
    const dead = permanent || row.attempts - row.deferrals >= this.maxAttempts;
    const message = errorMessage(error);
    const nextAttemptAt = await this.fail(row, dead, message);
    if (dead) this.events.emit('webhook:dead', { ...fields, error: message, invalid: false });
    else this.events.emit('webhook:retried', { ...fields, error: message, nextAttemptAt });
    return dead ? 'dead' : 'retry';
  }

  /** Records the failure; returns when the receipt is due again (now, for a dead one). */
  private async fail(row: ClaimedRow, dead: boolean, message: string): Promise<number> {
    const now = this.clock.now();
    const due = dead ? now : now + this.delay(row.attempts - row.deferrals);
    await this.sql.query(
      this.statements.fail,
      [
        row.source,
        row.delivery_id,
        row.attempts,
        dead ? 'dead' : 'pending',
        new Date(due),
        message,
        row.tenant_id,
      ],
      this.statements.names.fail,
    );
    return due;
  }
}

/** An entity's scope, key and version as statement parameters; three nulls without one. */
function entityParams(
  entity: { scope: string; key: string; version: string } | null,
): [string | null, string | null, string | null] {
  return entity ? [entity.scope, entity.key, entity.version] : [null, null, null];
}

/**
 * Creates a processor. See `WebhookProcessorOptions`.
 *
 * @example
 * const processor = createWebhookProcessor({
 *   sql: fromPg(pool),
 *   handlers: { stripe: { 'refund.updated': { ordering: 'state', entity: refundVersion, handle: applyRefund } } },
 * });
 * await processor.start();
 */
export function createWebhookProcessor<Client>(
  options: WebhookProcessorOptions<Client>,
): WebhookProcessor<Client> {
  return new WebhookProcessor(options);
}

const numeric = /^-?\d{1,60}(\.\d{1,30})?$/;

/** Turns a declared version into the text of a `numeric`; timestamps become epoch milliseconds. */
export function normaliseEntity(
  entity: EntityVersion,
  source: string,
): { scope: string; key: string; version: string } {
  if (typeof entity.key !== 'string' || entity.key.length === 0) {
    throw new InvalidArgumentError('an entity key must be a non-empty string');
  }
  const { version } = entity;
  let text: string;
  if (typeof version === 'bigint') text = version.toString();
  else if (typeof version === 'number') {
    if (!Number.isFinite(version)) throw new InvalidArgumentError('an entity version must be finite');
    text = Number.isInteger(version) ? BigInt(version).toString() : String(version);
  } else if (version instanceof Date) {
    const ms = version.getTime();
    if (Number.isNaN(ms)) throw new InvalidArgumentError('an entity version date is invalid');
    text = String(ms);
  } else if (typeof version === 'string' && numeric.test(version)) text = version;
  else if (typeof version === 'string' && !Number.isNaN(Date.parse(version)))
    text = String(Date.parse(version));
  else
    throw new InvalidArgumentError(
      'an entity version must be a number, a bigint, a Date or an ISO timestamp',
    );
  if (!numeric.test(text)) throw new InvalidArgumentError('an entity version is out of range');
  return { scope: entity.scope ?? source, key: entity.key, version: text };
}

const orderings: readonly WebhookOrdering[] = ['state', 'sequence', 'none'];
const sequenceVersion = /^\d{1,60}$/;

/** Checks a handler's options once, when the processor is made. */
function resolveHandler<Client>(
  name: string,
  given: WebhookHandler<Client> | ((tx: Transaction<Client>, event: WebhookEvent) => Promise<void>),
): ResolvedHandler<Client> {
  if (typeof given === 'function')
    return { ordering: 'none', firstVersion: '1', gapTimeoutMs: undefined, handle: given };
  const ordering = given.ordering ?? (given.entity ? 'state' : 'none');
  if (!orderings.includes(ordering)) {
    throw new InvalidArgumentError(`handler ${name}: ordering must be 'state', 'sequence' or 'none'`);
  }
  if (ordering !== 'none' && typeof given.entity !== 'function') {
    throw new InvalidArgumentError(`handler ${name}: ordering '${ordering}' needs an entity(event) function`);
  }
  const firstVersion = String(given.firstVersion ?? 1);
  if (!sequenceVersion.test(firstVersion)) {
    throw new InvalidArgumentError(`handler ${name}: firstVersion must be a non-negative integer`);
  }
  if (given.gapTimeoutMs !== undefined) positiveInteger(`handler ${name}: gapTimeoutMs`, given.gapTimeoutMs);
  return {
    ordering,
    // `none` ignores a declared entity: nothing is ordered, nothing is locked.
    entity: ordering === 'none' ? undefined : given.entity!.bind(given),
    validate: given.validate?.bind(given),
    firstVersion,
    gapTimeoutMs: given.gapTimeoutMs,
    handle: given.handle.bind(given),
  };
}

/** The entity the event declares, normalised; throws when the event cannot be ordered (invalid). */
function declaredEntity<Client>(
  handler: ResolvedHandler<Client>,
  event: WebhookEvent,
  source: string,
): DeclaredEntity | null {
  if (handler.ordering === 'none' || !handler.entity) return null;
  const declared = handler.entity(event);
  if (declared === null || declared === undefined) {
    if (handler.ordering === 'sequence')
      throw new InvalidArgumentError('a sequence event must declare its entity');
    return null;
  }
  const entity = normaliseEntity(declared, source);
  if (handler.ordering === 'sequence' && !sequenceVersion.test(entity.version)) {
    throw new InvalidArgumentError(
      `a sequence version must be a non-negative integer (got ${entity.version.slice(0, 40)})`,
    );
  }
  return { ...entity, ordering: handler.ordering };
}

function decodeReceipt(row: Record<string, unknown>): WebhookReceipt {
  return {
    tenant: row.tenant_id as string,
    source: row.source as string,
    deliveryId: row.delivery_id as string,
    eventType: (row.event_type as string | null) ?? null,
    headers: parseJsonColumn(row.headers) as Record<string, string>,
    body: row.body as Uint8Array,
    receivedAt: toMillis(row.received_at)!,
    state: row.state as WebhookReceipt['state'],
    attempts: Number(row.attempts) - Number(row.deferrals),
    deferrals: Number(row.deferrals),
    nextAttemptAt: scheduled(row.next_attempt_at),
    lastError: (row.last_error as string | null) ?? null,
    entityScope: (row.entity_scope as string | null) ?? null,
    entityKey: (row.entity_key as string | null) ?? null,
    entityVersion: versionText(row.entity_version),
    waitingSince: toMillis(row.waiting_since),
    processedAt: toMillis(row.processed_at),
    expiresAt: toMillis(row.expires_at)!,
  };
}

/** A parked receipt's 'infinity' arrives as Infinity (pg) or as the text 'infinity'. */
function scheduled(value: unknown): number | null {
  const ms = value === 'infinity' ? Number.POSITIVE_INFINITY : toMillis(value);
  return ms === null || !Number.isFinite(ms) ? null : ms;
}

/** numeric arrives as text from pg and postgres.js, keeping its full precision. */
function versionText(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return value;
  return typeof value === 'number' || typeof value === 'bigint' ? value.toString() : JSON.stringify(value);
}
