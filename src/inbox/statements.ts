import { createHash } from 'node:crypto';
import { quoteSchema } from '../migrate/schema-name.js';

/** The inbox's SQL, rendered once per schema. */
export interface InboxStatements {
  /** $1 consumer, $2 message id, $3 now, $4 expires at. One row when this is the first delivery. */
  record: string;
  /** $1 consumer, $2 message id, $3 now, $4 expires at. Revives a dead record (a redrive). */
  revive: string;
  /** $1 consumer, $2 message id. Counts a duplicate delivery on the record. */
  countDuplicate: string;
  /** $1..$2 id, $3 attempts, $4 error, $5 origin, $6 payload, $7 headers, $8 now, $9 expires at. */
  markDead: string;
  /** $1 consumer, $2 message id. */
  read: string;
  /** $1 now, $2 batch size. */
  sweep: string;
  /** $1 consumer or null. */
  stats: string;
  /** Names of the hot statements, so node-postgres prepares them once per connection. */
  names: Record<'record' | 'revive' | 'countDuplicate', { name: string }>;
}

export function renderInboxStatements(schema: string): InboxStatements {
  const texts = renderTexts(schema);
  const name = (key: 'record' | 'revive' | 'countDuplicate') => ({
    name: `idem_inbox_${key}_${createHash('sha1').update(texts[key]).digest('hex').slice(0, 12)}`,
  });
  return {
    ...texts,
    names: { record: name('record'), revive: name('revive'), countDuplicate: name('countDuplicate') },
  };
}

function renderTexts(schema: string): Omit<InboxStatements, 'names'> {
  const s = quoteSchema(schema);
  return {
    // The hot path: one statement. On a concurrent first delivery it waits for that transaction
    // and then inserts nothing, so "processed" is decided by the unique key, never by a read.
    record: `INSERT INTO ${s}.inbox (consumer, message_id, state, processed_at, expires_at)
      VALUES ($1, $2, 'processed', $3, $4) ON CONFLICT (consumer, message_id) DO NOTHING`,
    revive: `UPDATE ${s}.inbox SET state = 'processed', processed_at = $3, expires_at = $4
      WHERE consumer = $1 AND message_id = $2 AND state = 'dead'`,
    countDuplicate: `UPDATE ${s}.inbox SET duplicates = duplicates + 1 WHERE consumer = $1 AND message_id = $2`,
    // Never turns a processed record into a dead one: a late failure report of a message that
    // another delivery already processed changes nothing.
    markDead: `INSERT INTO ${s}.inbox AS i (consumer, message_id, state, attempts, last_error, origin, payload,
        headers, processed_at, expires_at)
      VALUES ($1, $2, 'dead', $3, $4, $5, $6, $7::jsonb, $8, $9)
      ON CONFLICT (consumer, message_id) DO UPDATE SET attempts = EXCLUDED.attempts,
        last_error = EXCLUDED.last_error, origin = EXCLUDED.origin, payload = EXCLUDED.payload,
        headers = EXCLUDED.headers, processed_at = EXCLUDED.processed_at, expires_at = EXCLUDED.expires_at
      WHERE i.state = 'dead'`,
    read: `SELECT consumer, message_id, state, attempts, duplicates, last_error, origin, payload,
        headers::text AS headers, processed_at, expires_at
      FROM ${s}.inbox WHERE consumer = $1 AND message_id = $2`,
    // Short autocommit deletes that skip rows a consumer holds.
    sweep: `DELETE FROM ${s}.inbox WHERE (consumer, message_id) IN (
        SELECT consumer, message_id FROM ${s}.inbox WHERE expires_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
    stats: `SELECT count(*) FILTER (WHERE state = 'processed')::bigint AS processed,
        count(*) FILTER (WHERE state = 'dead')::bigint AS dead,
        coalesce(sum(duplicates), 0)::bigint AS duplicates
      FROM ${s}.inbox WHERE $1::text IS NULL OR consumer = $1`,
  };
}
