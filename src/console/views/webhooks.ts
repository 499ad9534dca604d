/**
 * Webhooks: incoming receipts (backlog, dead letters, superseded and unhandled events, claims
 * whose lease lapsed), sequence entities parked on a gap, and the sender's deliveries (failed
 * ones, disabled endpoints). Endpoint secrets are never read; endpoint URLs are shown without
 * their query.
 */
import { ageMs, iso, num, str, text, readPage, type ConsoleDatabase } from '../database.js';
import { listParkedEntities, type ParkedEntity } from '../../webhooks/entities.js';
import type { WebhookReceipt } from '../../webhooks/processor.js';
import { optionalName, type Query } from '../params.js';
import { previewBytes, type BodyPreview } from '../preview.js';
import { redactHeaders, safeUrl } from '../redact.js';
import type { ReceiptRow } from '../statements/webhooks.js';

export interface ReceiptView {
  /** The tenant the receipt was recorded for ('' for the default one). */
  tenant: string;
  source: string;
  deliveryId: string;
  eventType: string | null;
  state: WebhookReceipt['state'];
  attempts: number;
  lastError: string | null;
  receivedAt: string | null;
  ageMs: number | null;
  nextAttemptAt: string | null;
  processedAt: string | null;
  entity: { scope: string | null; key: string; version: string | null } | null;
  /** For superseded receipts: the version already applied to the entity, which this one was older than. */
  appliedVersion: string | null;
  headers: [string, string][];
  body: BodyPreview | null;
}

/** A parked entity as `listParkedEntities` gives it, with its times as ISO text. */
export type ParkedEntityView = Omit<ParkedEntity, 'waitingSince' | 'parkedAt'> & {
  waitingSince: string | null;
  parkedAt: string | null;
  parkedAgeMs: number | null;
};

export interface WebhooksView {
  sources: { source: string; counts: Record<string, number>; oldestPendingAgeMs: number | null }[];
  dead: ReceiptView[];
  /** Sequence entities whose later versions waited past the gap timeout for a missing one. */
  parked: ParkedEntityView[];
  superseded: ReceiptView[];
  unhandled: ReceiptView[];
  /** Claimed receipts whose lease ended: the worker died mid-way; another worker will take them. */
  stuck: ReceiptView[];
  deliveries: { counts: Record<string, number> };
  failedDeliveries: {
    tenant: string;
    /** The `webhook-id` of every attempt: the receiver's delivery id. */
    messageId: string;
    endpointId: string;
    eventType: string | null;
    url: string | null;
    state: string;
    attempts: number;
    lastStatus: number | null;
    lastError: string | null;
    createdAt: string | null;
    ageMs: number | null;
  }[];
  disabledEndpoints: { id: string; url: string; reason: string | null; disabledAt: string | null }[];
}

export async function readWebhooks(db: ConsoleDatabase, query: Query): Promise<WebhooksView> {
  const filter = { source: optionalName(query, 'source') };
  const { webhooks } = db.statements;
  return readPage(db, query, async (tx, { max, now }) => {
    const sources = new Map<string, { counts: Record<string, number>; oldest: number | null }>();
    for (const r of await webhooks.counts(tx, filter)) {
      const entry = sources.get(text(r.source)) ?? { counts: {}, oldest: null };
      entry.counts[text(r.state)] = num(r.n);
      const oldest = ageMs(r.oldest, now);
      if (oldest !== null) entry.oldest = Math.max(entry.oldest ?? 0, oldest);
      sources.set(text(r.source), entry);
    }
    const page = { ...filter, limit: max };
    const receipts = (rows: ReceiptRow[]) => rows.map((r) => receipt(r, now));
    const deliveryCounts = await webhooks.deliveryCounts(tx);
    const failed = await webhooks.failedDeliveries(tx, { limit: max });
    const disabled = await webhooks.disabledEndpoints(tx, { limit: max });
    return {
      sources: [...sources].map(([name, entry]) => ({
        source: name,
        counts: entry.counts,
        oldestPendingAgeMs: entry.oldest,
      })),
      dead: receipts(await webhooks.dead(tx, page)),
      parked: (await listParkedEntities(tx, { schema: db.schema, limit: max })).map((e) => ({
        ...e,
        waitingSince: iso(e.waitingSince),
        parkedAt: iso(e.parkedAt),
        parkedAgeMs: ageMs(e.parkedAt, now),
      })),
      superseded: receipts(await webhooks.superseded(tx, page)),
      unhandled: receipts(await webhooks.unhandled(tx, page)),
      stuck: receipts(await webhooks.stuck(tx, { ...page, now: new Date(now) })),
      deliveries: { counts: Object.fromEntries(deliveryCounts.map((r) => [text(r.state), num(r.n)])) },
      failedDeliveries: failed.map((r) => ({
        tenant: text(r.tenant_id),
        messageId: text(r.message_id),
        endpointId: text(r.endpoint_id),
        eventType: str(r.event_type),
        url: r.url === null || r.url === undefined ? null : safeUrl(text(r.url)),
        state: text(r.state),
        attempts: num(r.attempts),
        lastStatus: r.last_status === null ? null : num(r.last_status),
        lastError: str(r.last_error),
        createdAt: iso(r.created_at),
        ageMs: ageMs(r.created_at, now),
      })),
      disabledEndpoints: disabled.map((r) => ({
        id: text(r.id),
        url: safeUrl(text(r.url)),
        reason: str(r.disabled_reason),
        disabledAt: iso(r.disabled_at),
      })),
    };
  });
}

/** A receipt row as the view shows it, its age as of `now`. */
function receipt(r: ReceiptRow, now: number): ReceiptView {
  return {
    tenant: text(r.tenant_id),
    source: text(r.source),
    deliveryId: text(r.delivery_id),
    eventType: str(r.event_type),
    state: r.state as ReceiptView['state'],
    attempts: num(r.attempts),
    lastError: str(r.last_error),
    receivedAt: iso(r.received_at),
    ageMs: ageMs(r.received_at, now),
    nextAttemptAt: iso(r.next_attempt_at),
    processedAt: iso(r.processed_at),
    entity:
      r.entity_key === null || r.entity_key === undefined
        ? null
        : { scope: str(r.entity_scope), key: text(r.entity_key), version: str(r.entity_version) },
    appliedVersion: str(r.applied_version),
    headers: redactHeaders(typeof r.headers === 'string' ? (JSON.parse(r.headers) as unknown) : null),
    body: previewBytes(r.body as Uint8Array | null),
  };
}
