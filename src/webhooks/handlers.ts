/**
 * The handler model: what a handler of one event type declares (its ordering, the entity and
 * version an event is about, a validation), checked once when the processor is made, and how a
 * claimed receipt finds its handler.
 */
import { InvalidArgumentError } from '../core/errors.js';
import type { Transaction } from '../core/sql.js';
import { positiveInteger } from '../core/validate.js';
import type { WebhookEvent } from './event.js';

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

/** A handler with its defaults resolved. */
export interface ResolvedHandler<Client> {
  ordering: WebhookOrdering;
  entity?: (event: WebhookEvent) => EntityVersion | null | undefined;
  validate?: WebhookHandler<Client>['validate'];
  firstVersion: string;
  gapTimeoutMs: number | undefined;
  handle(tx: Transaction<Client>, event: WebhookEvent): Promise<void>;
}

/** The entity an event declared, normalised, with its handler's model. */
export interface DeclaredEntity {
  scope: string;
  key: string;
  version: string;
  ordering: 'state' | 'sequence';
}

/** The handler of a receipt's source and type: the type's own, else the source's `'*'`. */
export type HandlerLookup<Client> = (
  source: string,
  type: string | null,
) => ResolvedHandler<Client> | undefined;

/** Checks every handler once, when the processor is made, and answers which one a receipt gets. */
export function registerHandlers<Client>(handlers: WebhookHandlers<Client>): HandlerLookup<Client> {
  const bySource = new Map<string, Map<string, ResolvedHandler<Client>>>();
  for (const [source, byType] of Object.entries(handlers)) {
    const resolved = new Map<string, ResolvedHandler<Client>>();
    for (const [type, given] of Object.entries(byType)) {
      resolved.set(type, resolveHandler(`${source}/${type}`, given));
    }
    bySource.set(source, resolved);
  }
  return (source, type) => {
    const ofSource = bySource.get(source);
    if (!ofSource) return undefined;
    return (type !== null ? ofSource.get(type) : undefined) ?? ofSource.get('*');
  };
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
export function declaredEntity<Client>(
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
