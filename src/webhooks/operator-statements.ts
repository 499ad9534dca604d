/**
 * The operator tools' statements about receipts and entities: redrive and list receipts, list the
 * parked entities, skip a gap, discard a receipt. They run rarely, so they are sent unnamed (a
 * named statement would stay prepared on every connection of the pool). The tools that need no
 * processor (entities.ts, discard.ts) render these alone.
 */
import { defaultSchema, quoteSchema } from '../core/schema-name.js';
import { affectedRows, allRows, defineStatement, firstRow, nothing, tenantForms } from '../core/statement.js';
import { validateTenant } from '../core/tenant.js';
import type { EntityRef, ParkedRow, ReceiptKey, ReceiptRow, SkippedEntityRow } from './receipt-rows.js';

export const receiptColumns = `tenant_id, source, delivery_id, event_type, headers, body, received_at, state,
  attempts, deferrals, next_attempt_at, last_error, entity_scope, entity_key, entity_version, waiting_since,
  processed_at, expires_at`;

/** Which receipts a redrive puts back to pending: in `states`, of one source or delivery ids. */
export interface ReceiptRedrive {
  now: Date;
  states: readonly string[];
  source: string | null;
  deliveryIds: readonly string[] | null;
}

/** Every operator statement about receipts and entities, for one schema. */
export function renderOperatorStatements(schema: string) {
  const s = quoteSchema(schema);
  // $1 scope, $2 key, $3 tenant: the entity of an operator's statement.
  const entity = (e: EntityRef) => [e.scope, e.key, e.tenant];
  return {
    /**
     * Puts receipts of every tenant (`redrive`), or of one (`redriveTenant`, $5 tenant), back to
     * pending with fresh attempts; answers how many.
     */
    ...tenantForms('redrive', {
      text: (pin) => `UPDATE ${s}.webhook_receipts
      SET state = 'pending', attempts = 0, deferrals = 0, waiting_since = NULL, next_attempt_at = $1
      WHERE ${pin === null ? '' : `tenant_id = ${pin} AND `}state = ANY($2::text[])
        AND ($3::text IS NULL OR source = $3)
        AND ($4::text[] IS NULL OR delivery_id = ANY($4::text[]))`,
      pin: '$5',
      params: (r: ReceiptRedrive) => [r.now, r.states, r.source, r.deliveryIds],
      result: affectedRows,
    }),

    /** Receipts in `states`, oldest first; of one source or tenant, or every one. */
    list: defineStatement({
      text: `SELECT ${receiptColumns} FROM ${s}.webhook_receipts
      WHERE state = ANY($1::text[]) AND ($2::text IS NULL OR source = $2)
        AND ($4::text IS NULL OR tenant_id = $4)
      ORDER BY received_at LIMIT $3`,
      params: (l: {
        states: readonly string[];
        source: string | null;
        limit: number;
        tenant: string | null;
      }) => [l.states, l.source, l.limit, l.tenant],
      result: allRows<ReceiptRow>,
    }),

    /** Operator tools (entities.ts). Parked entities of every tenant (or one), with what waits. */
    parked: defineStatement({
      text: `SELECT e.tenant_id, e.scope, e.entity_key, e.version::text AS version,
        e.missing_version::text AS missing_version, e.parked_at, e.parked_reason, w.waiting,
        w.lowest::text AS lowest, w.since
      FROM ${s}.webhook_entity_versions e
      LEFT JOIN LATERAL (
        SELECT count(*)::int AS waiting, min(r.entity_version) AS lowest,
          min(coalesce(r.waiting_since, r.received_at)) AS since
        FROM ${s}.webhook_receipts r
        WHERE r.tenant_id = e.tenant_id AND r.state = 'waiting' AND r.entity_scope = e.scope
          AND r.entity_key = e.entity_key
      ) w ON true
      WHERE e.parked_at IS NOT NULL AND ($1::text IS NULL OR e.scope = $1)
        AND ($3::text IS NULL OR e.tenant_id = $3)
      ORDER BY e.parked_at LIMIT $2`,
      params: (p: { scope: string | null; limit: number; tenant: string | null }) => [
        p.scope,
        p.limit,
        p.tenant,
      ],
      result: allRows<ParkedRow>,
    }),

    /**
     * Skipping a gap: lock the entity (an operator may wait for a worker that holds it: it commits
     * within one handler), record the skip, move the entity past it, wake what waits.
     */
    skipLockEntity: defineStatement({
      text: `SELECT ordering, (version + 1)::text AS next, missing_version::text AS missing,
        (SELECT min(entity_version)::text FROM ${s}.webhook_receipts
          WHERE tenant_id = $3 AND state = 'waiting' AND entity_scope = $1 AND entity_key = $2) AS lowest
      FROM ${s}.webhook_entity_versions WHERE tenant_id = $3 AND scope = $1 AND entity_key = $2 FOR UPDATE`,
      params: entity,
      result: firstRow<SkippedEntityRow>,
    }),
    skipInsert: defineStatement({
      text: `INSERT INTO ${s}.webhook_entity_skips
        (tenant_id, scope, entity_key, from_version, through_version, skipped_at, reason)
      VALUES ($7, $1, $2, $3, $4, $5, $6)`,
      params: (k: { entity: EntityRef; from: string; through: string; now: Date; reason: string | null }) => [
        k.entity.scope,
        k.entity.key,
        k.from,
        k.through,
        k.now,
        k.reason,
        k.entity.tenant,
      ],
      result: nothing,
    }),
    /** Counted as progress (applied_at): a further gap gets its full timeout from now. */
    skipAdvance: defineStatement({
      text: `UPDATE ${s}.webhook_entity_versions
      SET version = $3, applied_at = $4, parked_at = NULL, parked_reason = NULL, missing_version = NULL
      WHERE tenant_id = $5 AND scope = $1 AND entity_key = $2`,
      params: (a: { entity: EntityRef; through: string; now: Date }) => [
        a.entity.scope,
        a.entity.key,
        a.through,
        a.now,
        a.entity.tenant,
      ],
      result: nothing,
    }),
    /** Makes the receipts waiting up to version `through` (or parked) due now; answers how many. */
    skipWake: defineStatement({
      text: `UPDATE ${s}.webhook_receipts SET next_attempt_at = $4
      WHERE tenant_id = $5 AND state = 'waiting' AND entity_scope = $1 AND entity_key = $2
        AND (entity_version <= $3::numeric OR next_attempt_at = 'infinity')`,
      params: (w: { entity: EntityRef; through: string; now: Date }) => [
        w.entity.scope,
        w.entity.key,
        w.through,
        w.now,
        w.entity.tenant,
      ],
      result: affectedRows,
    }),

    /**
     * Discarding one receipt (discard.ts): a dead letter by an operator's decision, from pending or
     * waiting only (a claimed one is a worker's until its attempt ends). A claim that locked it
     * first makes this wait for the claim and then find it processing, not pending.
     */
    discard: defineStatement({
      text: `UPDATE ${s}.webhook_receipts
      SET state = 'dead', next_attempt_at = $4, processed_at = $4, last_error = $5, waiting_since = NULL
      WHERE tenant_id = $3 AND source = $1 AND delivery_id = $2 AND state IN ('pending', 'waiting')
      RETURNING entity_scope, entity_key`,
      params: (d: { receipt: ReceiptKey; now: Date; error: string }) => [
        d.receipt.source,
        d.receipt.deliveryId,
        d.receipt.tenant,
        d.now,
        d.error,
      ],
      result: firstRow<{ entity_scope: string | null; entity_key: string | null }>,
    }),
    /** A receipt's state, locked for the discard. */
    receiptState: defineStatement({
      text: `SELECT state FROM ${s}.webhook_receipts
      WHERE tenant_id = $3 AND source = $1 AND delivery_id = $2 FOR UPDATE`,
      params: (r: ReceiptKey) => [r.source, r.deliveryId, r.tenant],
      result: firstRow<{ state: string }>,
    }),
    /**
     * A parked entity with nothing left waiting behind its gap is parked on nothing: unpark it. A
     * receipt that starts waiting later looks at its gap afresh (and parks it again past the
     * timeout). Answers 1 when it unparked it.
     */
    unparkIdle: defineStatement({
      text: `UPDATE ${s}.webhook_entity_versions
      SET parked_at = NULL, parked_reason = NULL, missing_version = NULL
      WHERE tenant_id = $3 AND scope = $1 AND entity_key = $2 AND parked_at IS NOT NULL
        AND NOT EXISTS (
          SELECT 1 FROM ${s}.webhook_receipts
          WHERE tenant_id = $3 AND state = 'waiting' AND entity_scope = $1 AND entity_key = $2)`,
      params: entity,
      result: affectedRows,
    }),
  };
}

export type OperatorStatements = ReturnType<typeof renderOperatorStatements>;

/**
 * One of the operators' lists (`listReceipts`, `listParkedEntities`): checks the tenant, renders
 * the schema's statements (default `idem`), hands `list` what every list takes, the limit
 * (default 100) and the tenant (`null`: every tenant), and decodes the rows it reads.
 */
export async function operatorList<R, T>(
  options: { schema?: string; limit?: number; tenant?: string },
  decode: (row: R) => T,
  list: (statements: OperatorStatements, page: { limit: number; tenant: string | null }) => Promise<R[]>,
): Promise<T[]> {
  if (options.tenant !== undefined) validateTenant(options.tenant);
  const statements = renderOperatorStatements(options.schema ?? defaultSchema);
  const rows = await list(statements, { limit: options.limit ?? 100, tenant: options.tenant ?? null });
  return rows.map((row) => decode(row));
}
