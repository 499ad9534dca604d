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
  advanceVersion: string;
  finish: string;
  fail: string;
  redrive: string;
  sweep: string;
  list: string;
}

/** The texts, and a prepared-statement name per text (node-postgres parses and plans each once per connection). */
export type ReceiptStatements = ReceiptStatementTexts & {
  names: Record<keyof ReceiptStatementTexts, { name: string }>;
};

export const receiptColumns = `source, delivery_id, event_type, headers, body, received_at, state, attempts,
  next_attempt_at, last_error, entity_scope, entity_key, entity_version, processed_at, expires_at`;

export function receiptStatements(schema: string): ReceiptStatements {
  const s = quoteSchema(schema);
  const texts: ReceiptStatementTexts = {
    // One statement, so one transaction: the receipt exists or it does not. A duplicate hits the
    // primary key and inserts nothing (rowCount 0); no row lock is held past the statement.
    insert: `INSERT INTO ${s}.webhook_receipts
        (source, delivery_id, event_type, headers, body, received_at, next_attempt_at, expires_at)
      VALUES ($1, $2, $3, $4::jsonb, $5, $6, $6, $7)
      ON CONFLICT (source, delivery_id) DO NOTHING`,

    // Claims due receipts: pending ones whose time has come, and processing ones whose worker's
    // lease ran out (it crashed or hung). SKIP LOCKED lets many workers claim without waiting on
    // each other. The claim raises `attempts`, which fences the previous holder's writes.
    claim: `WITH due AS (
        SELECT source, delivery_id FROM ${s}.webhook_receipts
        WHERE state IN ('pending', 'processing') AND next_attempt_at <= $1
        ORDER BY next_attempt_at, received_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      )
      UPDATE ${s}.webhook_receipts r
      SET state = 'processing', attempts = r.attempts + 1, next_attempt_at = $3
      FROM due WHERE r.source = due.source AND r.delivery_id = due.delivery_id
      RETURNING r.source, r.delivery_id, r.event_type, r.headers, r.body, r.received_at, r.attempts`,

    // First statement of the processing transaction: the receipt is still ours (same claim).
    lock: `SELECT 1 FROM ${s}.webhook_receipts
      WHERE source = $1 AND delivery_id = $2 AND state = 'processing' AND attempts = $3
      FOR UPDATE`,

    // Moves the entity's version forward, or leaves it (and returns no row) when this event is
    // older. The row lock it takes serialises handlers of one entity across workers.
    advanceVersion: `INSERT INTO ${s}.webhook_entity_versions AS v
        (scope, entity_key, version, source, delivery_id, applied_at)
      VALUES ($1, $2, $3, $4, $5, $6)
      ON CONFLICT (scope, entity_key) DO UPDATE
        SET version = EXCLUDED.version, source = EXCLUDED.source,
            delivery_id = EXCLUDED.delivery_id, applied_at = EXCLUDED.applied_at
        WHERE v.version <= EXCLUDED.version
      RETURNING 1`,

    finish: `UPDATE ${s}.webhook_receipts
      SET state = $4, processed_at = $5, last_error = $6,
          entity_scope = $7, entity_key = $8, entity_version = $9
      WHERE source = $1 AND delivery_id = $2 AND attempts = $3`,

    // After a failed attempt (its transaction rolled back): retry later, or dead. Fenced.
    fail: `UPDATE ${s}.webhook_receipts
      SET state = $4, next_attempt_at = $5, last_error = $6
      WHERE source = $1 AND delivery_id = $2 AND state = 'processing' AND attempts = $3`,

    redrive: `UPDATE ${s}.webhook_receipts
      SET state = 'pending', attempts = 0, next_attempt_at = $1
      WHERE state = ANY($2::text[])
        AND ($3::text IS NULL OR source = $3)
        AND ($4::text[] IS NULL OR delivery_id = ANY($4::text[]))`,

    // Bounded batches; dead receipts are kept until redriven or removed by hand.
    sweep: `DELETE FROM ${s}.webhook_receipts WHERE ctid IN (
        SELECT ctid FROM ${s}.webhook_receipts
        WHERE state IN ('applied', 'stale', 'unhandled') AND expires_at < $1
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
