/**
 * Workers that process stored receipts after the answer was sent. Each receipt is claimed with
 * `FOR UPDATE SKIP LOCKED`, then handled in one transaction that also moves its entity's version
 * forward and marks it applied: the handler's writes, the version and the receipt's state commit
 * together or not at all. Failures retry with backoff until a dead letter; dead and unhandled
 * receipts can be redriven.
 */
import { systemClock, toMillis, type Clock } from '../core/clock.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { Sql, Transaction } from '../core/sql.js';
import { defaultSchema } from '../migrate/schema-name.js';
import { exponentialBackoff, type BackoffOptions } from './backoff.js';
import { createEvent, type WebhookEvent } from './event.js';
import { consoleLogger, errorMessage, type WebhookLogger } from './logger.js';
import { receiptStatements, type ReceiptStatements } from './statements.js';

/**
 * An entity and the version of it that an event carries. An event whose version is lower than the
 * last one applied for the same (scope, key) is recorded as `stale` and never applied. An equal
 * version is applied (two events may share a timestamp); handlers write state, so re-applying the
 * same version sets the same values.
 */
export interface EntityVersion {
  /** The entity, e.g. a customer or order id. */
  key: string;
  /**
   * A number that only grows with the entity's changes: a sequence number, or a timestamp
   * (a `Date`, an ISO string or epoch milliseconds). Numeric strings keep their full precision.
   */
  version: number | bigint | string | Date;
  /** Entities of one scope compare versions with each other. Default: the receipt's source. */
  scope?: string;
}

/** Handles one event type of one source. */
export interface WebhookHandler<Client = unknown> {
  /**
   * Declares the entity and version this event is about, for order-aware handling. Return
   * `undefined` (or omit this) for events that are not about one versioned entity.
   */
  entity?(event: WebhookEvent): EntityVersion | null | undefined;
  /** Applies the event through `tx`; idem commits it with the entity version and the receipt's state. */
  handle(tx: Transaction<Client>, event: WebhookEvent): Promise<void>;
}

/** `handlers[source][eventType]`; `'*'` catches every type of a source (and receipts with no type). */
export type WebhookHandlers<Client = unknown> = Record<
  string,
  Record<string, WebhookHandler<Client> | ((tx: Transaction<Client>, event: WebhookEvent) => Promise<void>)>
>;

/** Options of `createWebhookProcessor`. */
export interface WebhookProcessorOptions<Client = unknown> {
  /** A pool: every receipt is processed in its own transaction. */
  sql: Sql<Client>;
  /** Schema of idem's tables. Default `idem`. */
  schema?: string;
  /** Time for claims, leases, backoff and retention. Default: the system clock. */
  clock?: Clock;
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
  /** Attempts before a receipt becomes a dead letter. Default 12 (about 2.5 hours with the default backoff). */
  maxAttempts?: number;
  /** Backoff between attempts. Default: 5 s doubling to at most 1 hour, with equal jitter. */
  backoff?: BackoffOptions;
  /** Random numbers in [0, 1) for jitter. Default `Math.random`. */
  random?: () => number;
  /** Default: warnings and errors to stderr as JSON. */
  logger?: WebhookLogger;
}

/** What happened to one claimed receipt. */
export type ProcessOutcome = 'applied' | 'stale' | 'unhandled' | 'retry' | 'dead' | 'lost';

/** A receipt as stored. */
export interface WebhookReceipt {
  source: string;
  deliveryId: string;
  eventType: string | null;
  headers: Record<string, string>;
  body: Uint8Array;
  receivedAt: Date;
  state: 'pending' | 'processing' | 'applied' | 'stale' | 'unhandled' | 'dead';
  attempts: number;
  nextAttemptAt: Date;
  lastError: string | null;
  entityScope: string | null;
  entityKey: string | null;
  entityVersion: string | null;
  processedAt: Date | null;
  expiresAt: Date;
}

/** Selects receipts to redrive. */
export interface RedriveOptions {
  /** Only this source. Default: every source. */
  source?: string;
  /** Only these delivery ids. Default: every receipt in `states`. */
  deliveryIds?: string[];
  /** Which states to redrive. Default `['dead']`; `'unhandled'` once a handler for the type exists. */
  states?: ('dead' | 'unhandled')[];
}

interface ClaimedRow {
  source: string;
  delivery_id: string;
  event_type: string | null;
  headers: Record<string, string> | string;
  body: Uint8Array;
  received_at: unknown;
  attempts: number;
}

/** Processes receipts. `start()` runs workers; `runOnce()` and `drain()` drive it by hand (tests, cron). */
export class WebhookProcessor<Client = unknown> {
  readonly schema: string;
  readonly clock: Clock;
  private readonly sql: Sql<Client>;
  private readonly statements: ReceiptStatements;
  private readonly handlers: WebhookHandlers<Client>;
  private readonly concurrency: number;
  private readonly pollIntervalMs: number;
  private readonly leaseMs: number;
  private readonly maxAttempts: number;
  private readonly delay: (failures: number) => number;
  private readonly logger: WebhookLogger;
  private running = false;
  private loops: Promise<void>[] = [];
  private wake: { promise: Promise<void>; resolve: () => void } = signal();

  constructor(options: WebhookProcessorOptions<Client>) {
    this.sql = options.sql;
    this.schema = options.schema ?? defaultSchema;
    this.statements = receiptStatements(this.schema);
    this.clock = options.clock ?? systemClock;
    this.handlers = options.handlers;
    this.concurrency = positiveInteger('concurrency', options.concurrency ?? 4);
    this.pollIntervalMs = positiveInteger('pollIntervalMs', options.pollIntervalMs ?? 1000);
    this.leaseMs = positiveInteger('leaseMs', options.leaseMs ?? 60_000);
    this.maxAttempts = positiveInteger('maxAttempts', options.maxAttempts ?? 12);
    this.delay = exponentialBackoff(options.backoff ?? {}, options.random ?? Math.random);
    this.logger = options.logger ?? consoleLogger;
  }

  /** Starts `concurrency` workers. Idempotent. */
  start(): void {
    if (this.running) return;
    this.running = true;
    for (let i = 0; i < this.concurrency; i++) this.loops.push(this.loop());
  }

  /** Stops the workers after their current receipt. */
  async stop(): Promise<void> {
    this.running = false;
    this.notify();
    await Promise.all(this.loops);
    this.loops = [];
  }

  /** Wakes idle workers now (call it from the receiver's `onReceipt`). */
  notify(): void {
    const current = this.wake;
    this.wake = signal();
    current.resolve();
  }

  /** Claims up to `limit` due receipts and processes them concurrently. Returns their outcomes. */
  async runOnce(limit = this.concurrency): Promise<ProcessOutcome[]> {
    const now = this.clock.now();
    const { rows } = await this.sql.query<ClaimedRow & Record<string, unknown>>(
      this.statements.claim,
      [new Date(now), limit, new Date(now + this.leaseMs)],
      this.statements.names.claim,
    );
    return Promise.all(rows.map((row) => this.process(row)));
  }

  /**
   * Processes until no receipt is due (retries scheduled later stay for later). Bounded by
   * `maxRounds` batches. Returns the outcomes, in order of processing.
   */
  async drain(options: { limit?: number; maxRounds?: number } = {}): Promise<ProcessOutcome[]> {
    const outcomes: ProcessOutcome[] = [];
    for (let round = 0; round < (options.maxRounds ?? 10_000); round++) {
      const batch = await this.runOnce(options.limit ?? this.concurrency);
      if (batch.length === 0) break;
      outcomes.push(...batch);
    }
    return outcomes;
  }

  /** Puts dead (or unhandled) receipts back to pending with fresh attempts. Returns how many. */
  async redrive(options: RedriveOptions = {}): Promise<number> {
    const states = options.states ?? ['dead'];
    for (const state of states) {
      if (state !== 'dead' && state !== 'unhandled')
        throw new InvalidArgumentError(`cannot redrive ${String(state)} receipts`);
    }
    const { rowCount } = await this.sql.query(this.statements.redrive, [
      new Date(this.clock.now()),
      states,
      options.source ?? null,
      options.deliveryIds ?? null,
    ]);
    if (rowCount > 0) {
      this.logger.info?.('webhook receipts redriven', { count: rowCount, source: options.source });
      this.notify();
    }
    return rowCount;
  }

  /** Lists receipts in the given states (default: dead letters), oldest first. */
  async receipts(
    options: { states?: WebhookReceipt['state'][]; source?: string; limit?: number } = {},
  ): Promise<WebhookReceipt[]> {
    const { rows } = await this.sql.query(this.statements.list, [
      options.states ?? ['dead'],
      options.source ?? null,
      options.limit ?? 100,
    ]);
    return rows.map(decodeReceipt);
  }

  /**
   * Deletes applied, stale and unhandled receipts past their retention, in bounded batches that
   * skip locked rows. Dead receipts are kept until redriven. Entity versions are kept: they stop a
   * very late replay from moving state backwards after its receipt is gone.
   */
  async sweep(options: { batchSize?: number; maxBatches?: number } = {}): Promise<{ deleted: number }> {
    const batchSize = options.batchSize ?? 1000;
    let deleted = 0;
    for (let batch = 0; batch < (options.maxBatches ?? 1000); batch++) {
      const { rowCount } = await this.sql.query(this.statements.sweep, [
        new Date(this.clock.now()),
        batchSize,
      ]);
      deleted += rowCount;
      if (rowCount < batchSize) break;
    }
    return { deleted };
  }

  private async loop(): Promise<void> {
    while (this.running) {
      let processed = 0;
      try {
        processed = (await this.runOnce(1)).length;
      } catch (error) {
        this.logger.error?.('webhook worker could not claim receipts', { error: errorMessage(error) });
      }
      if (processed === 0 && this.running) {
        await Promise.race([this.clock.sleep(this.pollIntervalMs), this.wake.promise]);
      }
    }
  }

  private handlerFor(source: string, type: string | null): WebhookHandler<Client> | undefined {
    const bySource = this.handlers[source];
    if (!bySource) return undefined;
    const found =
      (type !== null && Object.hasOwn(bySource, type) ? bySource[type] : undefined) ?? bySource['*'];
    if (found === undefined) return undefined;
    return typeof found === 'function' ? { handle: found } : found;
  }

  private async process(row: ClaimedRow): Promise<ProcessOutcome> {
    const event = createEvent({
      source: row.source,
      deliveryId: row.delivery_id,
      type: row.event_type,
      headers:
        typeof row.headers === 'string' ? (JSON.parse(row.headers) as Record<string, string>) : row.headers,
      body: row.body,
      receivedAt: new Date(toMillis(row.received_at)!),
      attempt: row.attempts,
    });
    const fields = {
      source: row.source,
      deliveryId: row.delivery_id,
      eventType: row.event_type,
      attempt: row.attempts,
    };
    if (row.attempts > this.maxAttempts) {
      // Only after crashes: each claim counted an attempt that never reported back.
      await this.fail(row, true, 'attempts exhausted: the workers that claimed this receipt never finished');
      this.logger.error?.('webhook receipt dead', { ...fields, error: 'attempts exhausted by lost workers' });
      return 'dead';
    }
    const handler = this.handlerFor(row.source, row.event_type);
    try {
      const outcome = await this.sql.transaction(async (tx): Promise<ProcessOutcome> => {
        const locked = await tx.query(
          this.statements.lock,
          [row.source, row.delivery_id, row.attempts],
          this.statements.names.lock,
        );
        if (locked.rowCount === 0) return 'lost';
        if (!handler) {
          await this.finish(tx, row, 'unhandled', null);
          return 'unhandled';
        }
        const declared = handler.entity?.(event) ?? null;
        const entity = declared ? normaliseEntity(declared, row.source) : null;
        if (entity) {
          const advanced = await tx.query(
            this.statements.advanceVersion,
            [
              entity.scope,
              entity.key,
              entity.version,
              row.source,
              row.delivery_id,
              new Date(this.clock.now()),
            ],
            this.statements.names.advanceVersion,
          );
          if (advanced.rowCount === 0) {
            await this.finish(tx, row, 'stale', entity);
            return 'stale';
          }
        }
        await handler.handle(tx, event);
        await this.finish(tx, row, 'applied', entity);
        return 'applied';
      });
      if (outcome === 'lost') this.logger.warn?.('webhook receipt lost its claim', fields);
      else this.logger.debug?.(`webhook receipt ${outcome}`, fields);
      return outcome;
    } catch (error) {
      const permanent = (error as { retryable?: unknown } | null)?.retryable === false;
      const dead = permanent || row.attempts >= this.maxAttempts;
      await this.fail(row, dead, errorMessage(error));
      const logged = { ...fields, error: errorMessage(error) };
      if (dead) this.logger.error?.('webhook receipt dead', logged);
      else this.logger.warn?.('webhook receipt will be retried', logged);
      return dead ? 'dead' : 'retry';
    }
  }

  private async finish(
    tx: Transaction<Client>,
    row: ClaimedRow,
    state: 'applied' | 'stale' | 'unhandled',
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
        entity?.scope ?? null,
        entity?.key ?? null,
        entity?.version ?? null,
      ],
      this.statements.names.finish,
    );
  }

  private async fail(row: ClaimedRow, dead: boolean, message: string): Promise<void> {
    const now = this.clock.now();
    await this.sql.query(
      this.statements.fail,
      [
        row.source,
        row.delivery_id,
        row.attempts,
        dead ? 'dead' : 'pending',
        new Date(dead ? now : now + this.delay(row.attempts)),
        message,
      ],
      this.statements.names.fail,
    );
  }
}

/** Creates a processor. See `WebhookProcessorOptions`. */
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

function decodeReceipt(row: Record<string, unknown>): WebhookReceipt {
  const headers = row.headers;
  return {
    source: row.source as string,
    deliveryId: row.delivery_id as string,
    eventType: (row.event_type as string | null) ?? null,
    headers: (typeof headers === 'string' ? JSON.parse(headers) : headers) as Record<string, string>,
    body: row.body as Uint8Array,
    receivedAt: new Date(toMillis(row.received_at)!),
    state: row.state as WebhookReceipt['state'],
    attempts: Number(row.attempts),
    nextAttemptAt: new Date(toMillis(row.next_attempt_at)!),
    lastError: (row.last_error as string | null) ?? null,
    entityScope: (row.entity_scope as string | null) ?? null,
    entityKey: (row.entity_key as string | null) ?? null,
    // numeric arrives as text from pg and postgres.js, keeping its full precision.
    entityVersion: versionText(row.entity_version),
    processedAt: row.processed_at === null ? null : new Date(toMillis(row.processed_at)!),
    expiresAt: new Date(toMillis(row.expires_at)!),
  };
}

/** numeric arrives as text from pg and postgres.js, keeping its full precision. */
function versionText(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return value;
  return typeof value === 'number' || typeof value === 'bigint' ? value.toString() : JSON.stringify(value);
}

function signal(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value <= 0)
    throw new InvalidArgumentError(`${name} must be a positive integer`);
  return value;
}
