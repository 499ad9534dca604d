/**
 * Operator tools for receipts: list them by state (dead letters by default), and redrive dead or
 * unhandled ones back to pending with fresh attempts. They need no handlers: they run on the pool
 * alone; `WebhookProcessor.listReceipts()` and `.redrive()` call them too.
 */
import { systemClock, toMillis, type Clock } from '../core/clock.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { IdemEvents } from '../core/event-channel.js';
import { parseJsonColumn } from '../core/json-column.js';
import { defaultSchema } from '../core/schema-name.js';
import type { Queryable } from '../core/sql.js';
import { acrossOrPinned } from '../core/statement.js';
import type { ListParkedOptions } from './entities.js';
import { operatorList, renderOperatorStatements } from './operator-statements.js';
import type { ReceiptRow } from './receipt-rows.js';

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

/**
 * Which receipts `listReceipts` reads: the schema, the limit (default 100, oldest first) and the
 * tenant as for the parked entities.
 */
export interface ListReceiptsOptions extends Omit<ListParkedOptions, 'scope'> {
  /** Only these states. Default `['dead']`: the dead letters. */
  states?: WebhookReceipt['state'][];
  /** Only this source. Default: every source. */
  source?: string;
}

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /** An operator's `redrive` put `count` (at least one) dead or unhandled receipts back to pending. */
    'webhook:redriven': {
      count: number;
      states: readonly ('dead' | 'unhandled')[];
      source?: string;
      tenant?: string;
    };
  }
}

/** Receipts in the given states (default: dead letters), oldest first; of one tenant or all. */
export function listReceipts(db: Queryable, options: ListReceiptsOptions = {}): Promise<WebhookReceipt[]> {
  return operatorList(options, decodeReceipt, (statements, page) =>
    statements.list(db, { states: options.states ?? ['dead'], source: options.source ?? null, ...page }),
  );
}

/**
 * Puts dead (or unhandled) receipts back to pending with fresh attempts; returns how many. With
 * `events`, a redrive that moved any reports `webhook:redriven` there.
 */
export async function redriveReceipts(
  db: Queryable,
  options: RedriveOptions & { schema?: string; clock?: Clock; events?: IdemEvents } = {},
): Promise<number> {
  const states = options.states ?? ['dead'];
  for (const state of states) {
    if (state !== 'dead' && state !== 'unhandled')
      throw new InvalidArgumentError(`cannot redrive ${String(state)} receipts`);
  }
  const statements = renderOperatorStatements(options.schema ?? defaultSchema);
  const which = {
    now: new Date((options.clock ?? systemClock).now()),
    states,
    source: options.source ?? null,
    deliveryIds: options.deliveryIds ?? null,
  };
  const forms = { across: statements.redrive, pinned: statements.redriveTenant };
  const count = await acrossOrPinned(db, forms, which, options.tenant);
  if (count > 0) {
    options.events?.emit('webhook:redriven', {
      count,
      states,
      ...(options.source !== undefined ? { source: options.source } : {}),
      ...(options.tenant !== undefined ? { tenant: options.tenant } : {}),
    });
  }
  return count;
}

function decodeReceipt(row: ReceiptRow): WebhookReceipt {
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
