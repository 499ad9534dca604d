import { prepareNames } from '../core/prepared-statements.js';
import { quoteSchema } from '../core/schema-name.js';

/**
 * The inbox's SQL, rendered once per schema. Every statement about one message names its tenant
 * ($1): the primary key is (tenant_id, consumer, message_id).
 */
export interface InboxStatements {
  /** $1 tenant, $2 consumer, $3 message id, $4 now, $5 expires at. One row when this is the first delivery. */
  record: string;
  /** $1 tenant, $2 consumer, $3 message id, $4 now, $5 expires at. Revives a dead record (a redrive). */
  revive: string;
  /** $1 tenant, $2 consumer, $3 message id. Counts a duplicate delivery on the record. */
  countDuplicate: string;
  /** $1..$3 id, $4 attempts, $5 error, $6 origin, $7 payload, $8 headers, $9 now, $10 expires at. */
  markDead: string;
  /** $1 tenant, $2 consumer, $3 message id. */
  read: string;
  /** $1 now, $2 batch size. Every tenant. */
  sweep: string;
  /** $1 now, $2 batch size, $3 tenant. One tenant (a sweeper scoped to tenants). */
  sweepTenant: string;
  /** $1 consumer or null. */
  stats: string;
  /** Names of the hot statements, so node-postgres prepares them once per connection. */
  names: Record<'record' | 'revive' | 'countDuplicate', { name: string }>;
}

export function renderInboxStatements(schema: string): InboxStatements {
  const texts = renderTexts(schema);
  return { ...texts, names: prepareNames('inbox', texts, ['record', 'revive', 'countDuplicate']) };
}

function renderTexts(schema: string): Omit<InboxStatements, 'names'> {
  const s = quoteSchema(schema);
  const message = `tenant_id = $1 AND consumer = $2 AND message_id = $3`;
  // Short autocommit deletes that skip rows a consumer holds.
  const sweep = (
    tenant: string,
  ) => `DELETE FROM ${s}.inbox WHERE ${tenant}(tenant_id, consumer, message_id) IN (
        SELECT tenant_id, consumer, message_id FROM ${s}.inbox WHERE ${tenant}expires_at < $1
        LIMIT $2 FOR UPDATE SKIP LOCKED)`;
  return {
    // The hot path: one statement. On a concurrent first delivery it waits for that transaction
    // and then inserts nothing, so "processed" is decided by the unique key, never by a read.
    record: `INSERT INTO ${s}.inbox (tenant_id, consumer, message_id, state, processed_at, expires_at)
      VALUES ($1, $2, $3, 'processed', $4, $5) ON CONFLICT (tenant_id, consumer, message_id) DO NOTHING`,
    revive: `UPDATE ${s}.inbox SET state = 'processed', processed_at = $4, expires_at = $5
      WHERE ${message} AND state = 'dead'`,
    countDuplicate: `UPDATE ${s}.inbox SET duplicates = duplicates + 1 WHERE ${message}`,
    // Never turns a processed record into a dead one: a late failure report of a message that
    // another delivery already processed changes nothing.
    markDead: `INSERT INTO ${s}.inbox AS i (tenant_id, consumer, message_id, state, attempts, last_error, origin,
        payload, headers, processed_at, expires_at)
      VALUES ($1, $2, $3, 'dead', $4, $5, $6, $7, $8::jsonb, $9, $10)
      ON CONFLICT (tenant_id, consumer, message_id) DO UPDATE SET attempts = EXCLUDED.attempts,
        last_error = EXCLUDED.last_error, origin = EXCLUDED.origin, payload = EXCLUDED.payload,
        headers = EXCLUDED.headers, processed_at = EXCLUDED.processed_at, expires_at = EXCLUDED.expires_at
      WHERE i.state = 'dead'`,
    read: `SELECT tenant_id, consumer, message_id, state, attempts, duplicates, last_error, origin, payload,
        headers::text AS headers, processed_at, expires_at
      FROM ${s}.inbox WHERE ${message}`,
    sweep: sweep(''),
    sweepTenant: sweep('tenant_id = $3 AND '),
    stats: `SELECT count(*) FILTER (WHERE state = 'processed')::bigint AS processed,
        count(*) FILTER (WHERE state = 'dead')::bigint AS dead,
        coalesce(sum(duplicates), 0)::bigint AS duplicates
      FROM ${s}.inbox WHERE $1::text IS NULL OR consumer = $1`,
  };
}
