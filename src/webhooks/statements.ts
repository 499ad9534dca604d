/**
 * Every statement of the receiver and its workers, rendered once per schema. Times come from the
 * injected clock as parameters, never from `now()`, so tests move time instead of sleeping.
 */
import { prepareNames } from '../core/prepared-statements.js';
import { quoteSchema } from '../core/schema-name.js';

export interface ReceiptStatementTexts {
  insert: string;
  claim: string;
  claimTenant: string;
  lock: string;
  ensureEntity: string;
  lockEntity: string;
  applyVersion: string;
  wait: string;
  park: string;
  skipCovering: string;
  finish: string;
  fail: string;
  reject: string;
  redrive: string;
  redriveTenant: string;
  sweep: string;
  sweepTenant: string;
  list: string;
  parked: string;
  skipLockEntity: string;
  skipInsert: string;
  skipAdvance: string;
  skipWake: string;
  discard: string;
  receiptState: string;
  unparkIdle: string;
}

/** The texts, and a prepared-statement name per text (node-postgres parses and plans each once per connection). */
export type ReceiptStatements = ReceiptStatementTexts & {
  names: Record<keyof ReceiptStatementTexts, { name: string }>;
};

export const receiptColumns = `tenant_id, source, delivery_id, event_type, headers, body, received_at, state,
  attempts, deferrals, next_attempt_at, last_error, entity_scope, entity_key, entity_version, waiting_since,
  processed_at, expires_at`;

/**
 * Every statement about one receipt or entity names its tenant, as the last parameter: the primary
 * keys are (tenant_id, source, delivery_id) and (tenant_id, scope, entity_key). The workers' claim
 * and the sweeper come in two forms: across every tenant, and pinned to one (`…Tenant`).
 */
export function receiptStatements(schema: string): ReceiptStatements {
  const s = quoteSchema(schema);
  // Claims due receipts: pending ones whose time has come, waiting ones whose wait is over (or
  // that were woken), and processing ones whose worker's lease ran out (it crashed or hung).
  // SKIP LOCKED lets many workers claim without waiting on each other. The claim raises
  // `attempts`, which fences the previous holder's writes.
  const claim = (pin: string | null) => `WITH due AS (
        SELECT tenant_id, source, delivery_id FROM ${s}.webhook_receipts
        WHERE ${pin === null ? '' : `tenant_id = ${pin} AND `}state IN ('pending', 'processing', 'waiting')
          AND next_attempt_at <= $1
        ORDER BY next_attempt_at, received_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      )
      UPDATE ${s}.webhook_receipts r
      SET state = 'processing', attempts = r.attempts + 1, next_attempt_at = $3
      FROM due WHERE ${pin === null ? 'r.tenant_id = due.tenant_id' : `r.tenant_id = ${pin}`}
        AND r.source = due.source AND r.delivery_id = due.delivery_id
      RETURNING r.tenant_id, r.source, r.delivery_id, r.event_type, r.headers, r.body, r.received_at,
        r.attempts, r.deferrals, r.waiting_since`;
  const redrive = (pin: string | null) => `UPDATE ${s}.webhook_receipts
      SET state = 'pending', attempts = 0, deferrals = 0, waiting_since = NULL, next_attempt_at = $1
      WHERE ${pin === null ? '' : `tenant_id = ${pin} AND `}state = ANY($2::text[])
        AND ($3::text IS NULL OR source = $3)
        AND ($4::text[] IS NULL OR delivery_id = ANY($4::text[]))`;
  // Bounded batches; dead and waiting receipts are kept until processed, redriven or removed by
  // hand. ctid: the rows are locked, so they cannot move before the DELETE reaches them.
  const sweep = (pin: string) => `DELETE FROM ${s}.webhook_receipts WHERE ${pin}ctid IN (
        SELECT ctid FROM ${s}.webhook_receipts
        WHERE ${pin}state IN ('applied', 'superseded', 'duplicate', 'unhandled') AND expires_at < $1
        LIMIT $2 FOR UPDATE SKIP LOCKED)`;
  const texts: ReceiptStatementTexts = {
    // One statement, so one transaction: the receipt exists or it does not. A duplicate hits the
    // primary key and inserts nothing (rowCount 0); no row lock is held past the statement.
    insert: `INSERT INTO ${s}.webhook_receipts
        (tenant_id, source, delivery_id, event_type, headers, body, received_at, next_attempt_at, expires_at)
      VALUES ($8, $1, $2, $3, $4::jsonb, $5, $6, $6, $7)
      ON CONFLICT (tenant_id, source, delivery_id) DO NOTHING`,

    claim: claim(null),
    claimTenant: claim('$4'),

    // First statement of the processing transaction: the receipt is still ours (same claim).
    lock: `SELECT 1 FROM ${s}.webhook_receipts
      WHERE tenant_id = $4 AND source = $1 AND delivery_id = $2 AND state = 'processing' AND attempts = $3
      FOR UPDATE`,

    // Autocommitted before the processing transaction, so the entity's row exists to be locked.
    // Inside the transaction, two workers inserting the same new entity would make the second
    // wait for the first one's whole handler. Here an existing row is a conflict that does
    // nothing at once, even while another worker holds it FOR UPDATE; it waits only while another
    // transaction has written the row and not yet committed, which `applyVersion` keeps to the
    // last statements before COMMIT.
    ensureEntity: `INSERT INTO ${s}.webhook_entity_versions (tenant_id, scope, entity_key, ordering)
      VALUES ($4, $1, $2, $3)
      ON CONFLICT (tenant_id, scope, entity_key) DO NOTHING`,

    // The entity's lock: one worker at a time. SKIP LOCKED returns no row when another worker
    // holds it, and the receipt then waits instead of the worker. Compares the event's version
    // ($3) with the applied one and, for sequence entities, with the next expected one (the
    // applied version + 1, or the handler's first version $4 when none is applied yet).
    lockEntity: `SELECT ordering, version::text AS version,
        coalesce(version + 1, $4::numeric)::text AS expected,
        sign($3::numeric - version)::int AS versus_applied,
        sign($3::numeric - coalesce(version + 1, $4::numeric))::int AS versus_expected,
        applied_at, parked_at
      FROM ${s}.webhook_entity_versions
      WHERE tenant_id = $5 AND scope = $1 AND entity_key = $2
      FOR UPDATE SKIP LOCKED`,

    // Moves the entity to this version (unparking it) and wakes the receipts of the entity that
    // wait: every one for a state entity (they waited because it was busy); for a sequence entity
    // those up to the next version ($7) and those parked, which look at their gap afresh.
    applyVersion: `WITH applied AS (
        UPDATE ${s}.webhook_entity_versions
        SET version = $3, source = $4, delivery_id = $5, applied_at = $6,
            parked_at = NULL, parked_reason = NULL, missing_version = NULL
        WHERE tenant_id = $8 AND scope = $1 AND entity_key = $2
      )
      UPDATE ${s}.webhook_receipts SET next_attempt_at = $6
      WHERE tenant_id = $8 AND state = 'waiting' AND entity_scope = $1 AND entity_key = $2
        AND ($7::numeric IS NULL OR entity_version <= $7::numeric OR next_attempt_at = 'infinity')`,

    // Puts a claimed receipt back to wait for its entity, without spending a handler attempt.
    wait: `UPDATE ${s}.webhook_receipts
      SET state = 'waiting', next_attempt_at = $4, deferrals = deferrals + 1,
          entity_scope = $5, entity_key = $6, entity_version = $7, waiting_since = $8
      WHERE tenant_id = $9 AND source = $1 AND delivery_id = $2 AND state = 'processing' AND attempts = $3`,

    // The first receipt to find the gap over its timeout parks the entity; the reason stays.
    park: `UPDATE ${s}.webhook_entity_versions
      SET parked_at = coalesce(parked_at, $3), parked_reason = coalesce(parked_reason, $4),
          missing_version = coalesce(missing_version, $5)
      WHERE tenant_id = $6 AND scope = $1 AND entity_key = $2`,

    // Whether an operator skipped this version of the entity.
    skipCovering: `SELECT from_version::text AS from_version, through_version::text AS through_version,
        skipped_at, reason
      FROM ${s}.webhook_entity_skips
      WHERE tenant_id = $4 AND scope = $1 AND entity_key = $2
        AND $3::numeric BETWEEN from_version AND through_version
      LIMIT 1`,

    finish: `UPDATE ${s}.webhook_receipts
      SET state = $4, processed_at = $5, last_error = $6,
          entity_scope = $7, entity_key = $8, entity_version = $9, waiting_since = NULL
      WHERE tenant_id = $10 AND source = $1 AND delivery_id = $2 AND attempts = $3`,

    // After a failed attempt (its transaction rolled back): retry later, or dead. Fenced.
    fail: `UPDATE ${s}.webhook_receipts
      SET state = $4, next_attempt_at = $5, last_error = $6
      WHERE tenant_id = $7 AND source = $1 AND delivery_id = $2 AND state = 'processing' AND attempts = $3`,

    // An invalid event: a dead letter at once, with the reason and the entity it named. Fenced.
    reject: `UPDATE ${s}.webhook_receipts
      SET state = 'dead', next_attempt_at = $4, processed_at = $4, last_error = $5,
          entity_scope = $6, entity_key = $7, entity_version = $8, waiting_since = NULL
      WHERE tenant_id = $9 AND source = $1 AND delivery_id = $2 AND state = 'processing' AND attempts = $3`,

    redrive: redrive(null),
    redriveTenant: redrive('$5'),

    sweep: sweep(''),
    sweepTenant: sweep('tenant_id = $3 AND '),

    list: `SELECT ${receiptColumns} FROM ${s}.webhook_receipts
      WHERE state = ANY($1::text[]) AND ($2::text IS NULL OR source = $2)
        AND ($4::text IS NULL OR tenant_id = $4)
      ORDER BY received_at LIMIT $3`,

    // Operator tools (entities.ts). Parked entities of every tenant (or one), with what waits.
    parked: `SELECT e.tenant_id, e.scope, e.entity_key, e.version::text AS version,
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

    // Skipping a gap: lock the entity (an operator may wait for a worker that holds it: it commits
    // within one handler), record the skip, move the entity past it, wake what waits.
    skipLockEntity: `SELECT ordering, (version + 1)::text AS next, missing_version::text AS missing,
        (SELECT min(entity_version)::text FROM ${s}.webhook_receipts
          WHERE tenant_id = $3 AND state = 'waiting' AND entity_scope = $1 AND entity_key = $2) AS lowest
      FROM ${s}.webhook_entity_versions WHERE tenant_id = $3 AND scope = $1 AND entity_key = $2 FOR UPDATE`,
    skipInsert: `INSERT INTO ${s}.webhook_entity_skips
        (tenant_id, scope, entity_key, from_version, through_version, skipped_at, reason)
      VALUES ($7, $1, $2, $3, $4, $5, $6)`,
    // Counted as progress (applied_at): a further gap gets its full timeout from now.
    skipAdvance: `UPDATE ${s}.webhook_entity_versions
      SET version = $3, applied_at = $4, parked_at = NULL, parked_reason = NULL, missing_version = NULL
      WHERE tenant_id = $5 AND scope = $1 AND entity_key = $2`,
    skipWake: `UPDATE ${s}.webhook_receipts SET next_attempt_at = $4
      WHERE tenant_id = $5 AND state = 'waiting' AND entity_scope = $1 AND entity_key = $2
        AND (entity_version <= $3::numeric OR next_attempt_at = 'infinity')`,

    // Discarding one receipt (discard.ts): a dead letter by an operator's decision, from pending or
    // waiting only (a claimed one is a worker's until its attempt ends). A claim that locked it
    // first makes this wait for the claim and then find it processing, not pending.
    discard: `UPDATE ${s}.webhook_receipts
      SET state = 'dead', next_attempt_at = $4, processed_at = $4, last_error = $5, waiting_since = NULL
      WHERE tenant_id = $3 AND source = $1 AND delivery_id = $2 AND state IN ('pending', 'waiting')
      RETURNING entity_scope, entity_key`,
    receiptState: `SELECT state FROM ${s}.webhook_receipts
      WHERE tenant_id = $3 AND source = $1 AND delivery_id = $2 FOR UPDATE`,
    // A parked entity with nothing left waiting behind its gap is parked on nothing: unpark it. A
    // receipt that starts waiting later looks at its gap afresh (and parks it again past the timeout).
    unparkIdle: `UPDATE ${s}.webhook_entity_versions
      SET parked_at = NULL, parked_reason = NULL, missing_version = NULL
      WHERE tenant_id = $3 AND scope = $1 AND entity_key = $2 AND parked_at IS NOT NULL
        AND NOT EXISTS (
          SELECT 1 FROM ${s}.webhook_receipts
          WHERE tenant_id = $3 AND state = 'waiting' AND entity_scope = $1 AND entity_key = $2)`,
  };
  return { ...texts, names: prepareNames('wh', texts) };
}
