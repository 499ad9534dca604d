import { quoteSchema } from '../core/schema-name.js';
import type { Row } from '../core/sql.js';
import { affectedRows, defineStatement, firstRow, nothing, preparedStatement } from '../core/statement.js';
import type { StatementSpec } from '../core/statement.js';
import { sweepStatement, tenantSweepStatement } from '../core/sweeper.js';

/** One message's record: the primary key (tenant_id, consumer, message_id). */
export interface InboxKey {
  tenant: string;
  consumer: string;
  messageId: string;
}

/** A record written now, kept until `expiresAt`. */
export interface InboxWrite extends InboxKey {
  now: Date;
  expiresAt: Date;
}

/** A first record: with the intent and trace context that caused the message (`core/causation.ts`). */
export interface InboxRecordWrite extends InboxWrite {
  intent: string | null;
  traceparent: string | null;
}

/** A message given up on, as `markDead` stores it. */
export interface DeadRecord extends InboxWrite {
  attempts: number;
  error: string;
  origin: string | null;
  payload: Buffer | null;
  /** JSON text, or null. */
  headers: string | null;
}

/** A hot statement, prepared under its old key (`idem_inbox_<key>_<hash>`). */
const prepared = <Input, R extends Row, Output>(
  key: string,
  spec: Omit<StatementSpec<Input, R, Output>, 'name'>,
) => preparedStatement('inbox', key, spec);

const key = (m: InboxKey) => [m.tenant, m.consumer, m.messageId];
const write = (m: InboxWrite) => [m.tenant, m.consumer, m.messageId, m.now, m.expiresAt];

/**
 * The inbox's SQL, rendered once per schema. Every statement about one message names its tenant
 * ($1): the primary key is (tenant_id, consumer, message_id). The hot statements (`record`,
 * `revive`, `countDuplicate`) are named, so node-postgres prepares them once per connection.
 */
export function renderInboxStatements(schema: string) {
  const s = quoteSchema(schema);
  const message = `tenant_id = $1 AND consumer = $2 AND message_id = $3`;
  // Short autocommit deletes that skip rows a consumer holds.
  const sweep = (
    tenant: string,
  ) => `DELETE FROM ${s}.inbox WHERE ${tenant}(tenant_id, consumer, message_id) IN (
        SELECT tenant_id, consumer, message_id FROM ${s}.inbox WHERE ${tenant}expires_at < $1
        LIMIT $2 FOR UPDATE SKIP LOCKED)`;
  return {
    /**
     * The hot path: one statement, one row when this is the first delivery. On a concurrent first
     * delivery it waits for that transaction and then inserts nothing, so "processed" is decided by
     * the unique key, never by a read.
     */
    record: prepared('record', {
      text: `INSERT INTO ${s}.inbox (tenant_id, consumer, message_id, state, processed_at, expires_at, intent, traceparent)
      VALUES ($1, $2, $3, 'processed', $4, $5, $6, $7) ON CONFLICT (tenant_id, consumer, message_id) DO NOTHING`,
      params: (m: InboxRecordWrite) => [...write(m), m.intent, m.traceparent],
      result: affectedRows,
    }),
    /** Revives a dead record (a redrive); one row when it did. */
    revive: prepared('revive', {
      text: `UPDATE ${s}.inbox SET state = 'processed', processed_at = $4, expires_at = $5
      WHERE ${message} AND state = 'dead'`,
      params: write,
      result: affectedRows,
    }),
    /** Counts a duplicate delivery on the record. */
    countDuplicate: prepared('countDuplicate', {
      text: `UPDATE ${s}.inbox SET duplicates = duplicates + 1 WHERE ${message}`,
      params: key,
      result: nothing,
    }),
    /**
     * Records a dead message; one row unless it was processed. Never turns a processed record into
     * a dead one: a late failure report of a message that another delivery already processed
     * changes nothing.
     */
    markDead: defineStatement({
      text: `INSERT INTO ${s}.inbox AS i (tenant_id, consumer, message_id, state, attempts, last_error, origin,
        payload, headers, processed_at, expires_at)
      VALUES ($1, $2, $3, 'dead', $4, $5, $6, $7, $8::jsonb, $9, $10)
      ON CONFLICT (tenant_id, consumer, message_id) DO UPDATE SET attempts = EXCLUDED.attempts,
        last_error = EXCLUDED.last_error, origin = EXCLUDED.origin, payload = EXCLUDED.payload,
        headers = EXCLUDED.headers, processed_at = EXCLUDED.processed_at, expires_at = EXCLUDED.expires_at
      WHERE i.state = 'dead'`,
      params: (d: DeadRecord) => [
        ...key(d),
        d.attempts,
        d.error,
        d.origin,
        d.payload,
        d.headers,
        d.now,
        d.expiresAt,
      ],
      result: affectedRows,
    }),
    /** One record. */
    read: defineStatement({
      text: `SELECT tenant_id, consumer, message_id, state, attempts, duplicates, last_error, origin, payload,
        headers::text AS headers, processed_at, expires_at
      FROM ${s}.inbox WHERE ${message}`,
      params: key,
      result: firstRow<Record<string, unknown>>,
    }),
    /** Records past their retention, every tenant ($1 now, $2 batch size). */
    sweep: sweepStatement(sweep('')),
    /** `sweep` of one tenant ($3), for a sweeper scoped to tenants. */
    sweepTenant: tenantSweepStatement(sweep('tenant_id = $3 AND ')),
    /** Counts of every consumer, or of one ($1, or null). */
    stats: defineStatement({
      text: `SELECT count(*) FILTER (WHERE state = 'processed')::bigint AS processed,
        count(*) FILTER (WHERE state = 'dead')::bigint AS dead,
        coalesce(sum(duplicates), 0)::bigint AS duplicates
      FROM ${s}.inbox WHERE $1::text IS NULL OR consumer = $1`,
      params: ({ consumer }: { consumer: string | null }) => [consumer],
      result: firstRow<Record<string, unknown>>,
    }),
  };
}

export type InboxStatements = ReturnType<typeof renderInboxStatements>;
