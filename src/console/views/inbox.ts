/** The consumers' inbox: per-consumer counts and the dead messages with their errors. */
import { ageMs, iso, num, str, text, readPage, type ConsoleDatabase } from '../database.js';
import { optionalName, type Query } from '../params.js';
import { previewBytes, type BodyPreview } from '../preview.js';
import { redactHeaders } from '../redact.js';

export interface InboxView {
  consumers: { consumer: string; processed: number; dead: number; duplicates: number }[];
  dead: {
    consumer: string;
    messageId: string;
    attempts: number;
    lastError: string | null;
    origin: string | null;
    headers: [string, string][];
    payload: BodyPreview | null;
    processedAt: string | null;
    ageMs: number | null;
    expiresAt: string | null;
  }[];
}

export async function readInbox(db: ConsoleDatabase, query: Query): Promise<InboxView> {
  const consumer = optionalName(query, 'consumer');
  return readPage(db, query, async (tx, { max, now }) => {
    const consumers = await tx.query(
      `SELECT consumer, count(*) FILTER (WHERE state = 'processed')::bigint AS processed,
          count(*) FILTER (WHERE state = 'dead')::bigint AS dead, coalesce(sum(duplicates), 0)::bigint AS duplicates
        FROM ${db.s}.inbox WHERE $1::text IS NULL OR consumer = $1
        GROUP BY consumer ORDER BY consumer LIMIT 200`,
      [consumer ?? null],
    );
    const dead = await tx.query(
      `SELECT consumer, message_id, attempts, last_error, origin, payload, headers::text AS headers,
          processed_at, expires_at
        FROM ${db.s}.inbox WHERE state = 'dead' AND ($1::text IS NULL OR consumer = $1)
        ORDER BY processed_at DESC LIMIT $2`,
      [consumer ?? null, max],
    );
    return {
      consumers: consumers.rows.map((r) => ({
        consumer: text(r.consumer),
        processed: num(r.processed),
        dead: num(r.dead),
        duplicates: num(r.duplicates),
      })),
      dead: dead.rows.map((r) => ({
        consumer: text(r.consumer),
        messageId: text(r.message_id),
        attempts: num(r.attempts),
        lastError: str(r.last_error),
        origin: str(r.origin),
        headers: redactHeaders(typeof r.headers === 'string' ? (JSON.parse(r.headers) as unknown) : null),
        payload: previewBytes(r.payload as Uint8Array | null),
        processedAt: iso(r.processed_at),
        ageMs: ageMs(r.processed_at, now),
        expiresAt: iso(r.expires_at),
      })),
    };
  });
}
