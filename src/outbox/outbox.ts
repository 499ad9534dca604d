import { parseJsonColumn } from '../core/json-column.js';
import { v7 as uuidv7, validate as isUuid } from 'uuid';
import { systemClock, toMillis, type Clock } from '../core/clock.js';
import { InvalidArgumentError } from '../core/errors.js';
import { validateName } from '../core/keys.js';
import type { Queryable } from '../core/sql.js';
import {
  cutoffBefore,
  sweepInBatches,
  type RetentionSweepOptions,
  type SweepResult,
} from '../core/sweeper.js';
import { defaultTenant, validateTenant } from '../core/tenant.js';
import { defaultSchema } from '../core/schema-name.js';
import { renderOutboxStatements, type EventRow, type OutboxStatements } from './statements.js';
import { parseSnapshot } from '../observability/snapshot.js';
import type { NewOutboxEvent, OutboxEvent } from './types.js';
import type { StoreOptions } from '../core/store.js';
import { causationHeaders, currentCausation, withCausationHeaders } from '../core/causation.js';

/** Options of `createOutbox`. */
export interface OutboxOptions extends Omit<StoreOptions, 'sql'> {
  /**
   * Where redrive, stats, sweeps and reads run (any `Sql` or `Queryable`). Not needed to `add`
   * events, which run on the caller's transaction.
   */
  sql?: Queryable;
  /**
   * Send a NOTIFY with each add, delivered at commit, so dispatchers wake at once. Default true.
   * PostgreSQL serialises committing transactions that notify on one lock; at very high commit
   * rates turn it off and let dispatchers poll.
   */
  notify?: boolean;
  /**
   * The tenant of events that name none (`event.tenant`), and of `get`. Default `''`, the default
   * tenant. `createCells` gives each tenant an outbox with its tenant set here.
   */
  tenant?: string;
}

/** Which dead events to revive. With no field set, every dead event. */
export interface RedriveFilter {
  id?: string;
  topic?: string;
  key?: string;
  /** Only this tenant's events (one statement pinned to it). Default: every tenant. */
  tenant?: string;
}

export interface RedriveResult {
  /** Dead events made due again (attempts reset to 0). */
  revived: number;
  /** Later events of the same keys released from behind them. */
  released: number;
}

/** Counts of the outbox's rows. */
export interface OutboxStats {
  /** Not yet published and not dead (including retrying and parked ones). */
  pending: number;
  /** Pending and due now. */
  due: number;
  /** Pending after at least one failed attempt. */
  retrying: number;
  /** Pending behind a dead event of their key. */
  parked: number;
  dead: number;
  /** Published rows still kept under the retention policy. */
  published: number;
  /** Age of the oldest pending event, or null. */
  oldestPendingAgeMs: number | null;
}

/** An event with the dispatcher's bookkeeping, for tools and tests. */
export interface OutboxRecord extends OutboxEvent {
  seq: number;
  /** When it is due (epoch ms); null while it waits behind a dead event of its key. */
  availableAt: number | null;
  lastError: string | null;
  /** Epoch ms. */
  publishedAt: number | null;
  /** Epoch ms. */
  deadAt: number | null;
}

/** Options of the outbox's `sweep`. */
export interface OutboxSweepOptions extends RetentionSweepOptions {
  /** Keep published rows this long after publishing. Default 86400000 ms (24 hours). */
  olderThanMs?: number;
  /**
   * For Debezium (CDC) setups, where rows are never marked published: delete every row, published
   * or not, created more than `olderThanMs` ago (dead rows are kept). Default false.
   */
  capturedByCdc?: boolean;
}

export const defaultPublishedRetentionMs = 86_400_000;

/**
 * Writes events in the caller's transaction, and manages them afterwards.
 *
 * @example
 * const outbox = createOutbox({ sql: fromPg(pool) });
 * await sql.transaction(async (tx) => {
 *   await tx.query('UPDATE orders SET state = $2 WHERE id = $1', [orderId, 'paid']);
 *   await outbox.add(tx, { topic: 'orders', key: orderId, type: 'order.paid', payload: { orderId } });
 * });
 */
export class Outbox {
  readonly schema: string;
  readonly clock: Clock;
  private readonly statements: OutboxStatements;
  private readonly sql: Queryable | undefined;
  private readonly notify: boolean;
  /** The tenant of events that name none. */
  readonly tenant: string;

  constructor(options: OutboxOptions = {}) {
    this.schema = options.schema ?? defaultSchema;
    this.statements = renderOutboxStatements(this.schema);
    this.clock = options.clock ?? systemClock;
    this.sql = options.sql;
    this.notify = options.notify ?? true;
    this.tenant = options.tenant ?? defaultTenant;
    validateTenant(this.tenant);
  }

  /**
   * Adds one event in `tx`, the caller's open transaction (any adapter's `Transaction`, or any
   * `Queryable` bound to one connection inside BEGIN). It is published only if `tx` commits.
   * Events of one key are published in the order they were added; add them from transactions
   * that are serialised on the key (e.g. that update the aggregate's row), as you usually do.
   * Returns the event's id (a UUIDv7 unless `event.id` was given).
   *
   * @example
   * await sql.transaction(async (tx) => {
   *   await tx.query('UPDATE orders SET state = $2 WHERE id = $1', [orderId, 'paid']);
   *   await outbox.add(tx, { topic: 'orders', key: orderId, type: 'order.paid', payload: { orderId } });
   * });
   */
  async add(tx: Queryable, event: NewOutboxEvent): Promise<string> {
    const row = prepare(event, this.tenant);
    const now = new Date(this.clock.now());
    const { add, addWithoutNotify } = this.statements;
    await (this.notify ? add : addWithoutNotify)(tx, { event: row, now });
    return row.id;
  }

  /** Adds several events in one statement, in array order. Returns their ids. */
  async addMany(tx: Queryable, events: readonly NewOutboxEvent[]): Promise<string[]> {
    if (events.length === 0) return [];
    const rows = events.map((event) => prepare(event, this.tenant));
    const now = new Date(this.clock.now());
    const { addMany, addManyWithoutNotify } = this.statements;
    await (this.notify ? addMany : addManyWithoutNotify)(tx, { events: rows, now });
    return rows.map((row) => row.id);
  }

  /**
   * Makes dead events due again, with their attempts reset, and releases the later events of their
   * keys. Dispatchers are notified. Same as `idem outbox redrive`.
   */
  async redrive(filter: RedriveFilter = {}): Promise<RedriveResult> {
    if (filter.id !== undefined && !isUuid(filter.id)) throw new InvalidArgumentError('id must be a UUID');
    if (filter.tenant !== undefined) validateTenant(filter.tenant);
    const which = {
      now: new Date(this.clock.now()),
      id: filter.id ?? null,
      topic: filter.topic ?? null,
      key: filter.key ?? null,
    };
    const row =
      filter.tenant === undefined
        ? await this.statements.redrive(this.db(), which)
        : await this.statements.redriveTenant(this.db(), { ...which, tenant: filter.tenant });
    return { revived: Number(row?.revived ?? 0), released: Number(row?.released ?? 0) };
  }

  /**
   * Deletes published rows past the retention, in short batches that never wait on a dispatcher
   * (see `SweepOptions`).
   */
  async sweep(options: OutboxSweepOptions = {}): Promise<SweepResult> {
    const { statements } = this;
    const cdc = options.capturedByCdc === true;
    return sweepInBatches(
      this.db(),
      this.clock,
      [
        {
          statement: cdc ? statements.cleanupCaptured : statements.cleanup,
          tenantStatement: cdc ? statements.cleanupCapturedTenant : statements.cleanupTenant,
          cutoff: cutoffBefore(this.clock, options.olderThanMs ?? defaultPublishedRetentionMs),
        },
      ],
      options,
    );
  }

  /**
   * Counts of every topic's rows, or of one topic's (and of one tenant's). A full scan: for tools,
   * not hot paths.
   */
  async stats(options: { topic?: string; tenant?: string } = {}): Promise<OutboxStats> {
    if (options.tenant !== undefined) validateTenant(options.tenant);
    const now = this.clock.now();
    const row =
      (await this.statements.stats(this.db(), {
        now: new Date(now),
        topic: options.topic ?? null,
        tenant: options.tenant ?? null,
      })) ?? {};
    const { outbox } = parseSnapshot(row, ['outbox'], now);
    return {
      pending: outbox.backlog,
      due: outbox.due,
      retrying: outbox.retrying,
      parked: outbox.parked,
      dead: outbox.dead,
      published: Number(row['outbox.published'] ?? 0),
      oldestPendingAgeMs: outbox.lagMs,
    };
  }

  /** One event with its bookkeeping, or null. `tenant` defaults to the outbox's `tenant` option. */
  async get(ref: { id: string; tenant?: string }): Promise<OutboxRecord | null> {
    const { id } = ref;
    if (!isUuid(id)) throw new InvalidArgumentError('id must be a UUID');
    const tenant = ref.tenant ?? this.tenant;
    validateTenant(tenant);
    const row = await this.statements.read(this.db(), { tenant, id });
    return row ? decodeRecord(row) : null;
  }

  /** Dead events, oldest first (of every tenant, or of one). */
  async listDead(options: { limit?: number; topic?: string; tenant?: string } = {}): Promise<OutboxRecord[]> {
    if (options.tenant !== undefined) validateTenant(options.tenant);
    const rows = await this.statements.listDead(this.db(), {
      limit: options.limit ?? 100,
      topic: options.topic ?? null,
      tenant: options.tenant ?? null,
    });
    return rows.map(decodeRecord);
  }

  private db(): Queryable {
    if (!this.sql) throw new InvalidArgumentError('this outbox was created without `sql`');
    return this.sql;
  }
}

/**
 * Creates an outbox. `sql` is needed only for the methods that manage events afterwards (`get`,
 * `stats`, `redrive`, …); `add` writes on the transaction it is given.
 *
 * @example
 * const outbox = createOutbox({ sql: fromPg(pool) });
 */
export function createOutbox(options: OutboxOptions = {}): Outbox {
  return new Outbox(options);
}

/** Validates an event and returns its column values. */
function prepare(event: NewOutboxEvent, tenantByDefault: string): EventRow {
  const tenant = event.tenant ?? tenantByDefault;
  validateTenant(tenant);
  validateName('topic', event.topic);
  validateName('key', event.key);
  validateName('type', event.type);
  const id = event.id ?? uuidv7();
  if (!isUuid(id)) throw new InvalidArgumentError('event id must be a UUID');
  const payload = JSON.stringify(event.payload);
  if (payload === undefined) throw new InvalidArgumentError('event payload must be JSON-serialisable');
  for (const [name, value] of Object.entries(event.headers ?? {})) {
    if (typeof value !== 'string') throw new InvalidArgumentError(`header ${name} must be a string`);
  }
  // The intent and trace the event is added in are kept in its columns (for `idem trace`) and
  // join its headers when it is read (`withCausationHeaders`), so every publisher passes them on.
  const cause = currentCausation();
  const own = event.headers ?? {};
  return {
    intent: cause.intent,
    // A producer's own `traceparent` header wins, in the column as in the headers.
    traceparent: own[causationHeaders.traceparent] ?? cause.traceparent,
    tenant,
    id,
    topic: event.topic,
    key: event.key,
    type: event.type,
    payload,
    headers: JSON.stringify(own),
  };
}

/** Decodes an event row as the claim statement returns it (for the dispatcher; not in `idem/outbox`). */
export function decodeEvent(row: Record<string, unknown>): OutboxEvent {
  return {
    id: row.id as string,
    tenant: row.tenant_id as string,
    topic: row.aggregatetype as string,
    key: row.aggregateid as string,
    type: row.type as string,
    payload: parseJsonColumn(row.payload),
    headers: withCausationHeaders(
      (parseJsonColumn(row.headers) ?? {}) as Record<string, string>,
      row.intent,
      row.traceparent,
    ),
    createdAt: finiteMillis(row.created_at)!,
    attempts: Number(row.attempts),
  };
}

function decodeRecord(row: Record<string, unknown>): OutboxRecord {
  return {
    ...decodeEvent(row),
    seq: Number(row.seq),
    availableAt: finiteMillis(row.available_at),
    lastError: (row.last_error as string | null) ?? null,
    publishedAt: finiteMillis(row.published_at),
    deadAt: finiteMillis(row.dead_at),
  };
}

/** Epoch ms, or null for NULL and 'infinity' (a parked event's availability). */
function finiteMillis(value: unknown): number | null {
  if (value === 'infinity' || value === Infinity) return null;
  const ms = toMillis(value);
  return ms === null || !Number.isFinite(ms) ? null : ms;
}
