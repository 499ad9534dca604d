/**
 * Webhooks: incoming receipts (backlog, dead letters, superseded and unhandled events, claims
 * whose lease lapsed), sequence entities parked on a gap, and the sender's deliveries (failed
 * ones, disabled endpoints). Endpoint secrets are never read; endpoint URLs are shown without
 * their query.
 */
import type { Queryable } from '../../core/sql.js';
import { ageMs, iso, num, str, text, readPage, type ConsoleDatabase } from '../database.js';
import { listParkedEntities, type ParkedEntity } from '../../webhooks/entities.js';
import type { WebhookReceipt } from '../../webhooks/processor.js';
import { optionalName, type Query } from '../params.js';
import { previewBytes, type BodyPreview } from '../preview.js';
import { redactHeaders, safeUrl } from '../redact.js';

export interface ReceiptView {
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

const receiptColumns = `r.source, r.delivery_id, r.event_type, r.state, r.attempts - r.deferrals AS attempts,
  r.last_error, r.received_at,
  r.next_attempt_at, r.processed_at, r.entity_scope, r.entity_key, r.entity_version::text AS entity_version,
  r.headers::text AS headers, r.body`;

export async function readWebhooks(db: ConsoleDatabase, query: Query): Promise<WebhooksView> {
  const source = optionalName(query, 'source');
  return readPage(db, query, async (tx, { max, now }) => {
    const counts = await tx.query(
      `SELECT source, state, count(*)::bigint AS n,
          min(received_at) FILTER (WHERE state IN ('pending', 'processing')) AS oldest
        FROM ${db.s}.webhook_receipts WHERE $1::text IS NULL OR source = $1
        GROUP BY source, state ORDER BY source, state`,
      [source ?? null],
    );
    const sources = new Map<string, { counts: Record<string, number>; oldest: number | null }>();
    for (const r of counts.rows) {
      const entry = sources.get(text(r.source)) ?? { counts: {}, oldest: null };
      entry.counts[text(r.state)] = num(r.n);
      const oldest = ageMs(r.oldest, now);
      if (oldest !== null) entry.oldest = Math.max(entry.oldest ?? 0, oldest);
      sources.set(text(r.source), entry);
    }
    const list = (where: string, order: string) =>
      receipts(tx, db, now, `${where} AND ($1::text IS NULL OR r.source = $1)`, order, [source ?? null, max]);
    const deliveryCounts = await tx.query(
      `SELECT state, count(*)::bigint AS n FROM ${db.s}.webhook_deliveries GROUP BY state`,
    );
    const failed = await tx.query(
      `SELECT d.message_id, d.endpoint_id, m.event_type, e.url, d.state, d.attempts, d.last_status,
          d.last_error, d.created_at
        FROM ${db.s}.webhook_deliveries d
        LEFT JOIN ${db.s}.webhook_messages m ON m.id = d.message_id
        LEFT JOIN ${db.s}.webhook_endpoints e ON e.id = d.endpoint_id
        WHERE d.state IN ('failed', 'cancelled')
        ORDER BY d.created_at DESC LIMIT $1`,
      [max],
    );
    const disabled = await tx.query(
      `SELECT id, url, disabled_reason, disabled_at FROM ${db.s}.webhook_endpoints
        WHERE NOT enabled ORDER BY disabled_at DESC NULLS LAST LIMIT $1`,
      [max],
    );
    return {
      sources: [...sources].map(([name, entry]) => ({
        source: name,
        counts: entry.counts,
        oldestPendingAgeMs: entry.oldest,
      })),
      dead: await list(`r.state = 'dead'`, 'r.received_at DESC'),
      parked: (await listParkedEntities(tx, { schema: db.schema, limit: max })).map((e) => ({
        ...e,
        waitingSince: iso(e.waitingSince),
        parkedAt: iso(e.parkedAt),
        parkedAgeMs: ageMs(e.parkedAt, now),
      })),
      superseded: await list(`r.state = 'superseded'`, 'r.processed_at DESC NULLS LAST'),
      unhandled: await list(`r.state = 'unhandled'`, 'r.processed_at DESC NULLS LAST'),
      stuck: await receipts(
        tx,
        db,
        now,
        `r.state = 'processing' AND r.next_attempt_at <= $3 AND ($1::text IS NULL OR r.source = $1)`,
        'r.next_attempt_at',
        [source ?? null, max, new Date(now)],
      ),
      deliveries: { counts: Object.fromEntries(deliveryCounts.rows.map((r) => [text(r.state), num(r.n)])) },
      failedDeliveries: failed.rows.map((r) => ({
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
      disabledEndpoints: disabled.rows.map((r) => ({
        id: text(r.id),
        url: safeUrl(text(r.url)),
        reason: str(r.disabled_reason),
        disabledAt: iso(r.disabled_at),
      })),
    };
  });
}

/** `where` and `order` are fixed fragments of this module; every value is a parameter. */
async function receipts(
  tx: Queryable,
  db: ConsoleDatabase,
  now: number,
  where: string,
  order: string,
  params: unknown[],
): Promise<ReceiptView[]> {
  const { rows } = await tx.query(
    `SELECT ${receiptColumns}, v.version::text AS applied_version
      FROM ${db.s}.webhook_receipts r
      LEFT JOIN ${db.s}.webhook_entity_versions v
        ON r.state = 'superseded' AND v.scope = r.entity_scope AND v.entity_key = r.entity_key
      WHERE ${where} ORDER BY ${order} LIMIT $2`,
    params,
  );
  return rows.map((r) => ({
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
  }));
}
