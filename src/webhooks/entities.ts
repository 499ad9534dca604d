/**
 * Operator tools for the entities of order-aware webhook handlers: list the `sequence` entities
 * parked on a gap, and skip a gap (the missing versions will never be applied) so the entity
 * resumes. They need no handlers: the CLI (`idem webhooks parked|skip`) and the console use them
 * on the pool alone; `WebhookProcessor.parked()` and `.skip()` call them too.
 */
import { systemClock, toMillis, type Clock } from '../core/clock.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { Queryable, Sql } from '../core/sql.js';
import { defaultSchema, quoteSchema } from '../migrate/schema-name.js';

/** A `sequence` entity whose later versions waited longer than the gap timeout for a missing one. */
export interface ParkedEntity {
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
  waitingSince: Date | null;
  parkedAt: Date;
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
}

/** Parked entities, oldest first, with what waits behind each gap. */
export async function listParkedEntities(
  sql: Queryable,
  options: ListParkedOptions = {},
): Promise<ParkedEntity[]> {
  const s = quoteSchema(options.schema ?? defaultSchema);
  const { rows } = await sql.query(
    `SELECT e.scope, e.entity_key, e.version::text AS version, e.missing_version::text AS missing_version,
        e.parked_at, e.parked_reason, w.waiting, w.lowest::text AS lowest, w.since
      FROM ${s}.webhook_entity_versions e
      LEFT JOIN LATERAL (
        SELECT count(*)::int AS waiting, min(r.entity_version) AS lowest,
          min(coalesce(r.waiting_since, r.received_at)) AS since
        FROM ${s}.webhook_receipts r
        WHERE r.state = 'waiting' AND r.entity_scope = e.scope AND r.entity_key = e.entity_key
      ) w ON true
      WHERE e.parked_at IS NOT NULL AND ($1::text IS NULL OR e.scope = $1)
      ORDER BY e.parked_at LIMIT $2`,
    [options.scope ?? null, options.limit ?? 100],
  );
  return rows.map((r) => ({
    scope: r.scope as string,
    key: r.entity_key as string,
    appliedVersion: (r.version as string | null) ?? null,
    missingVersion: (r.missing_version as string | null) ?? null,
    waiting: Number(r.waiting ?? 0),
    lowestWaitingVersion: (r.lowest as string | null) ?? null,
    waitingSince: r.since === null || r.since === undefined ? null : new Date(toMillis(r.since)!),
    parkedAt: new Date(toMillis(r.parked_at)!),
    reason: (r.parked_reason as string | null) ?? '',
  }));
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
  /** Why: stored with the skip, shown on a late arrival of a skipped version, and logged. */
  reason?: string;
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

/**
 * Skips the missing versions of a `sequence` entity and resumes it: the versions from the next
 * expected one through `through` are recorded as skipped (never applied; one of them arriving
 * later is a dead letter that says so), the entity is unparked, and its waiting receipts are made
 * due. An operator's decision: the effects of the skipped events are lost unless made by hand.
 * Refuses (`InvalidArgumentError`) an unknown entity, a `state` entity, and a range with nothing
 * in it.
 */
export async function skipEntityGap(
  sql: Sql,
  options: SkipOptions & { schema?: string; clock?: Clock },
): Promise<SkipResult> {
  const s = quoteSchema(options.schema ?? defaultSchema);
  const now = new Date((options.clock ?? systemClock).now());
  if (options.through !== undefined && !/^\d{1,60}$/.test(String(options.through))) {
    throw new InvalidArgumentError('through must be a non-negative integer version');
  }
  return sql.transaction(async (tx) => {
    // An operator may wait for a worker that holds the entity: it commits within one handler.
    const { rows } = await tx.query(
      `SELECT ordering, (version + 1)::text AS next, missing_version::text AS missing,
          (SELECT min(entity_version)::text FROM ${s}.webhook_receipts
            WHERE state = 'waiting' AND entity_scope = $1 AND entity_key = $2) AS lowest
        FROM ${s}.webhook_entity_versions WHERE scope = $1 AND entity_key = $2 FOR UPDATE`,
      [options.scope, options.key],
    );
    const entity = rows[0] as
      { ordering: string; next: string | null; missing: string | null; lowest: string | null } | undefined;
    if (!entity) throw new InvalidArgumentError(`no webhook entity ${options.scope}/${options.key}`);
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
    await tx.query(
      `INSERT INTO ${s}.webhook_entity_skips (scope, entity_key, from_version, through_version, skipped_at, reason)
        VALUES ($1, $2, $3, $4, $5, $6)`,
      [options.scope, options.key, from.toString(), through.toString(), now, options.reason ?? null],
    );
    // Counted as progress (applied_at): a further gap gets its full timeout from now.
    await tx.query(
      `UPDATE ${s}.webhook_entity_versions
        SET version = $3, applied_at = $4, parked_at = NULL, parked_reason = NULL, missing_version = NULL
        WHERE scope = $1 AND entity_key = $2`,
      [options.scope, options.key, through.toString(), now],
    );
    const woken = await tx.query(
      `UPDATE ${s}.webhook_receipts SET next_attempt_at = $4
        WHERE state = 'waiting' AND entity_scope = $1 AND entity_key = $2
          AND (entity_version <= $3::numeric OR next_attempt_at = 'infinity')`,
      [options.scope, options.key, (through + 1n).toString(), now],
    );
    return { from: from.toString(), through: through.toString(), woken: woken.rowCount };
  });
}
