/** The consumers' inbox: per-consumer counts and the dead messages with their errors. */
import { ageMs, intentOf, iso, num, readPage, str, text } from '../database.js';
import type { ConsoleDatabase, ConsoleIntent } from '../database.js';
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
    /** The intent it was written on behalf of (`#/trace` shows its timeline), or null. */
    intent: ConsoleIntent | null;
  }[];
}

export async function readInbox(db: ConsoleDatabase, query: Query): Promise<InboxView> {
  const filter = { consumer: optionalName(query, 'consumer') };
  const { inbox } = db.statements;
  return readPage(db, query, async (tx, { max, now }) => {
    const consumers = await inbox.consumers(tx, filter);
    const dead = await inbox.dead(tx, { ...filter, limit: max });
    return {
      consumers: consumers.map((r) => ({
        consumer: text(r.consumer),
        processed: num(r.processed),
        dead: num(r.dead),
        duplicates: num(r.duplicates),
      })),
      dead: dead.map((r) => ({
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
        intent: intentOf(r.intent),
      })),
    };
  });
}
