/**
 * Operator tools for the entities of order-aware webhook handlers: list the `sequence` entities
 * parked on a gap, and skip a gap (the missing versions will never be applied) so the entity
 * resumes. They need no handlers: the CLI (`idem webhooks parked|skip`) and the console use them
 * on the pool alone; `WebhookProcessor.listParked()` and `.skip()` call them too.
 */
import { systemClock, toMillis, type Clock } from '../core/clock.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { IdemEvents } from '../core/event-channel.js';
import type { Queryable, Sql } from '../core/sql.js';
import { defaultTenant, validateTenant } from '../core/tenant.js';
import { defaultSchema } from '../core/schema-name.js';
import { operatorList, renderOperatorStatements } from './operator-statements.js';
import type { ParkedRow } from './receipt-rows.js';

/** A `sequence` entity whose later versions waited longer than the gap timeout for a missing one. */
export interface ParkedEntity {
  /** The tenant of the receipts that name the entity (`''`: the default tenant). */
  tenant: string;
  scope: string;
  key: string;
  /** The last version applied (or skipped), `null` when none was. */
  appliedVersion: string | null;
  /** The version it waits for. */
  missingVersion: string | null;
  /** Receipts of the entity waiting behind the gap. */
  waiting: number;
  /** The lowest version among them: skipping through the one before it lets it apply. */
  lowestWaitingVersion: string | null;
  /** When the oldest of them started waiting. */
  waitingSince: number | null;
  /** Epoch ms. */
  parkedAt: number;
  reason: string;
}

/** Options of `listParkedEntities`. */
export interface ListParkedOptions {
  /** Schema of idem's tables. Default `idem`. */
  schema?: string;
  /** Only this scope. Default: every scope. */
  scope?: string;
  /** At most this many, oldest parked first. Default 100. */
  limit?: number;
  /** Only this tenant's entities. Default: every tenant. */
  tenant?: string;
}

/** Parked entities, oldest first, with what waits behind each gap. */
export function listParkedEntities(sql: Queryable, options: ListParkedOptions = {}): Promise<ParkedEntity[]> {
  return operatorList(options, decodeParked, (statements, page) =>
    statements.parked(sql, { scope: options.scope ?? null, ...page }),
  );
}

function decodeParked(r: ParkedRow): ParkedEntity {
  return {
    tenant: r.tenant_id,
    scope: r.scope,
    key: r.entity_key,
    appliedVersion: r.version ?? null,
    missingVersion: r.missing_version ?? null,
    waiting: Number(r.waiting ?? 0),
    lowestWaitingVersion: r.lowest ?? null,
    waitingSince: toMillis(r.since),
    parkedAt: toMillis(r.parked_at)!,
    reason: r.parked_reason ?? '',
  };
}

/** Which gap to skip. */
export interface SkipOptions {
  /** The entity's scope (the handler's `scope`, or the receipt's source by default). */
  scope: string;
  /** The entity's key. */
  key: string;
  /**
   * Skip every missing version up to and including this one. Default: up to the version just
   * below the lowest one waiting, so that one applies next.
   */
  through?: number | bigint | string;
  /** Why: stored with the skip, shown on a late arrival of a skipped version, and in `webhook:gap-skipped`. */
  reason?: string;
  /** The entity's tenant (of the receipts that name it). Default `''`, the default tenant. */
  tenant?: string;
}

/** What a skip did. */
export interface SkipResult {
  /** The first version skipped. */
  from: string;
  /** The last version skipped: the entity now counts it as applied. */
  through: string;
  /** Waiting receipts made due again. */
  woken: number;
}

declare module '../core/event-channel.js' {
  interface IdemEventMap {
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

/**
 * Skips the missing versions of a `sequence` entity and resumes it: the versions from the next
 * expected one through `through` are recorded as skipped (never applied; one of them arriving
 * later is a dead letter that says so), the entity is unparked, and its waiting receipts are made
 * due. An operator's decision: the effects of the skipped events are lost unless made by hand.
 * Refuses (`InvalidArgumentError`) an unknown entity, a `state` entity, and a range with nothing
 * in it. With `events`, reports `webhook:gap-skipped` there.
 */
export async function skipEntityGap(
  sql: Sql,
  options: SkipOptions & { schema?: string; clock?: Clock; events?: IdemEvents },
): Promise<SkipResult> {
  const statements = renderOperatorStatements(options.schema ?? defaultSchema);
  const tenant = options.tenant ?? defaultTenant;
  validateTenant(tenant);
  const now = new Date((options.clock ?? systemClock).now());
  if (options.through !== undefined && !/^\d{1,60}$/.test(String(options.through))) {
    throw new InvalidArgumentError('through must be a non-negative integer version');
  }
  const ref = { tenant, scope: options.scope, key: options.key };
  const result = await sql.transaction(async (tx): Promise<SkipResult> => {
    // An operator may wait for a worker that holds the entity: it commits within one handler.
    const entity = await statements.skipLockEntity(tx, ref);
    if (!entity) {
      throw new InvalidArgumentError(
        `no webhook entity ${options.scope}/${options.key}${tenant === defaultTenant ? '' : ` of tenant ${tenant}`}`,
      );
    }
    if (entity.ordering !== 'sequence') {
      throw new InvalidArgumentError(
        `${options.scope}/${options.key} is ordered by state: it has no gaps to skip`,
      );
    }
    // Nothing applied yet and not parked: the handler's first version is not known here, so the
    // skip starts at 0 (versions below the first never come).
    const from = BigInt(entity.next ?? entity.missing ?? '0');
    let through: bigint;
    if (options.through !== undefined) through = BigInt(String(options.through));
    else if (entity.lowest !== null && /^\d+$/.test(entity.lowest)) through = BigInt(entity.lowest) - 1n;
    else throw new InvalidArgumentError('nothing waits behind the gap: give the version to skip through');
    if (through < from) {
      throw new InvalidArgumentError(`nothing to skip: version ${from} is the next one expected`);
    }
    await statements.skipInsert(tx, {
      entity: ref,
      from: from.toString(),
      through: through.toString(),
      now,
      reason: options.reason ?? null,
    });
    await statements.skipAdvance(tx, { entity: ref, through: through.toString(), now });
    const woken = await statements.skipWake(tx, { entity: ref, through: (through + 1n).toString(), now });
    return { from: from.toString(), through: through.toString(), woken };
  });
  // The event names the entity as `scope` and `key`, as `ref` does, and the range skipped.
  options.events?.emit('webhook:gap-skipped', {
    ...ref,
    ...(options.reason !== undefined ? { reason: options.reason } : {}),
    from: result.from,
    through: result.through,
  });
  return result;
}
