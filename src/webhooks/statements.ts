/**
 * Every statement of the receiver and its workers, rendered once per schema. Times come from the
 * injected clock as parameters, never from `now()`, so tests move time instead of sleeping.
 */
import { createHash } from 'node:crypto';
import { quoteSchema } from '../migrate/schema-name.js';

export interface ReceiptStatementTexts {
  insert: string;
  claim: string;
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
  sweep: string;
  list: string;
}

/** The texts, and a prepared-statement name per text (node-postgres parses and plans each once per connection). */
export type ReceiptStatements = ReceiptStatementTexts & {
  names: Record<keyof ReceiptStatementTexts, { name: string }>;
};

export const receiptColumns = `source, delivery_id, event_type, headers, body, received_at, state, attempts,
  deferrals, next_attempt_at, last_error, entity_scope, entity_key, entity_version, waiting_since,
  processed_at, expires_at`;

export function receiptStatements(schema: string): ReceiptStatements {
  const s = quoteSchema(schema);
  const texts: ReceiptStatementTexts = {
    // One statement, so one transaction: the receipt exists or it does not. A duplicate hits the
    // primary key and inserts nothing (rowCount 0); no row lock is held past the statement.
    insert: `INSERT INTO ${s}.webhook_receipts
        (source, delivery_id, event_type, headers, body, received_at, next_attempt_at, expires_at)
      VALUES ($1, $2, $3, $4::jsonb, $5, $6, $6, $7)
      ON CONFLICT (source, delivery_id) DO NOTHING`,

    // Claims due receipts: pending ones whose time has come, waiting ones whose wait is over (or
    // that were woken), and processing ones whose worker's lease ran out (it crashed or hung).
    // SKIP LOCKED lets many workers claim without waiting on each other. The claim raises
    // `attempts`, which fences the previous holder's writes.
    claim: `WITH due AS (
        SELECT source, delivery_id FROM ${s}.webhook_receipts
        WHERE state IN ('pending', 'processing', 'waiting') AND next_attempt_at <= $1
        ORDER BY next_attempt_at, received_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      )
      UPDATE ${s}.webhook_receipts r
      SET state = 'processing', attempts = r.attempts + 1, next_attempt_at = $3
      FROM due WHERE r.source = due.source AND r.delivery_id = due.delivery_id
      RETURNING r.source, r.delivery_id, r.event_type, r.headers, r.body, r.received_at, r.attempts,
        r.deferrals, r.waiting_since`,

    // First statement of the processing transaction: the receipt is still ours (same claim).
    lock: `SELECT 1 FROM ${s}.webhook_receipts
      WHERE source = $1 AND delivery_id = $2 AND state = 'processing' AND attempts = $3
      FOR UPDATE`,

    // Autocommitted before the processing transaction, so the entity's row exists to be locked.
    // Inside the transaction, two workers inserting the same new entity would make the second
    // wait for the first one's whole handler. Here an existing row is a conflict that does
    // nothing at once, even while another worker holds it FOR UPDATE; it waits only while another
    // transaction has written the row and not yet committed, which `applyVersion` keeps to the
    // last statements before COMMIT.
    ensureEntity: `INSERT INTO ${s}.webhook_entity_versions (scope, entity_key, ordering)
      VALUES ($1, $2, $3)
      ON CONFLICT (scope, entity_key) DO NOTHING`,

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
      WHERE scope = $1 AND entity_key = $2
      FOR UPDATE SKIP LOCKED`,

    // Moves the entity to this version (unparking it) and wakes the receipts of the entity that
    // wait: every one for a state entity (they waited because it was busy); for a sequence entity
    // those up to the next version ($7) and those parked, which look at their gap afresh.
    applyVersion: `WITH applied AS (
        UPDATE ${s}.webhook_entity_versions
        SET version = $3, source = $4, delivery_id = $5, applied_at = $6,
            parked_at = NULL, parked_reason = NULL, missing_version = NULL
        WHERE scope = $1 AND entity_key = $2
      )
      UPDATE ${s}.webhook_receipts SET next_attempt_at = $6
      WHERE state = 'waiting' AND entity_scope = $1 AND entity_key = $2
        AND ($7::numeric IS NULL OR entity_version <= $7::numeric OR next_attempt_at = 'infinity')`,

    // Puts a claimed receipt back to wait for its entity, without spending a handler attempt.
    wait: `UPDATE ${s}.webhook_receipts
      SET state = 'waiting', next_attempt_at = $4, deferrals = deferrals + 1,
          entity_scope = $5, entity_key = $6, entity_version = $7, waiting_since = $8
      WHERE source = $1 AND delivery_id = $2 AND state = 'processing' AND attempts = $3`,

    // The first receipt to find the gap over its timeout parks the entity; the reason stays.
    park: `UPDATE ${s}.webhook_entity_versions
      SET parked_at = coalesce(parked_at, $3), parked_reason = coalesce(parked_reason, $4),
          missing_version = coalesce(missing_version, $5)
      WHERE scope = $1 AND entity_key = $2`,

    // Whether an operator skipped this version of the entity.
    skipCovering: `SELECT from_version::text AS from_version, through_version::text AS through_version,
        skipped_at, reason
      FROM ${s}.webhook_entity_skips
      WHERE scope = $1 AND entity_key = $2 AND $3::numeric BETWEEN from_version AND through_version
      LIMIT 1`,

    finish: `UPDATE ${s}.webhook_receipts
      SET state = $4, processed_at = $5, last_error = $6,
          entity_scope = $7, entity_key = $8, entity_version = $9, waiting_since = NULL
      WHERE source = $1 AND delivery_id = $2 AND attempts = $3`,

    // After a failed attempt (its transaction rolled back): retry later, or dead. Fenced.
    fail: `UPDATE ${s}.webhook_receipts
      SET state = $4, next_attempt_at = $5, last_error = $6
      WHERE source = $1 AND delivery_id = $2 AND state = 'processing' AND attempts = $3`,

    // An invalid event: a dead letter at once, with the reason and the entity it named. Fenced.
    reject: `UPDATE ${s}.webhook_receipts
      SET state = 'dead', next_attempt_at = $4, processed_at = $4, last_error = $5,
          entity_scope = $6, entity_key = $7, entity_version = $8, waiting_since = NULL
      WHERE source = $1 AND delivery_id = $2 AND state = 'processing' AND attempts = $3`,

    redrive: `UPDATE ${s}.webhook_receipts
      SET state = 'pending', attempts = 0, deferrals = 0, waiting_since = NULL, next_attempt_at = $1
      WHERE state = ANY($2::text[])
        AND ($3::text IS NULL OR source = $3)
        AND ($4::text[] IS NULL OR delivery_id = ANY($4::text[]))`,

    // Bounded batches; dead and waiting receipts are kept until processed, redriven or removed by hand.
    sweep: `DELETE FROM ${s}.webhook_receipts WHERE ctid IN (
        SELECT ctid FROM ${s}.webhook_receipts
        WHERE state IN ('applied', 'superseded', 'duplicate', 'unhandled') AND expires_at < $1
        LIMIT $2 FOR UPDATE SKIP LOCKED)`,

    list: `SELECT ${receiptColumns} FROM ${s}.webhook_receipts
      WHERE state = ANY($1::text[]) AND ($2::text IS NULL OR source = $2)
      ORDER BY received_at LIMIT $3`,
  };
  return { ...texts, names: prepareNames('wh', texts) };
}

/** Names unique to each statement's text (so two schemas on one connection never collide). */
export function prepareNames<K extends string>(
  prefix: string,
  texts: Record<K, string>,
): Record<K, { name: string }> {
  return Object.fromEntries(
    Object.entries<string>(texts).map(([key, text]) => [
      key,
      { name: `idem_${prefix}_${key}_${createHash('sha1').update(text).digest('hex').slice(0, 12)}` },
    ]),
  ) as Record<K, { name: string }>;
}
