import { createHash } from 'node:crypto';
import { quoteSchema } from '../core/schema-name.js';
import type { Row } from '../core/sql.js';
import { allRows, defineStatement, firstRow, nothing, preparedStatement } from '../core/statement.js';
import type { StatementSpec } from '../core/statement.js';
import { sweepStatement, tenantSweepStatement } from '../core/sweeper.js';
import { snapshotStatement } from '../observability/snapshot.js';
import { claimStatement, markMovedStatement, markStatement, sameTenant, type Pin } from './claim-and-mark.js';
import { markedRows } from './marked.js';
import type { OutboxEvent } from './types.js';

/** An event's column values, validated (`prepare` in outbox.ts); payload and headers as JSON text. */
export interface EventRow {
  tenant: string;
  id: string;
  topic: string;
  key: string;
  type: string;
  payload: string;
  headers: string;
  /** The intent the event was added on behalf of (`core/causation.ts`), or null. */
  intent: string | null;
  /** The trace context it was added in (a producer's own `traceparent` header, if any), or null. */
  traceparent: string | null;
}

/** A row the claim returns: `held` on every row, and an event's columns (null on an empty batch). */
export type ClaimedRow = Record<string, unknown> & { held: number; row: string; seq: string };

/** What the claim takes: a batch of due events now, of `topics` (JSON text) or every topic. */
export interface ClaimInput {
  now: Date;
  limit: number;
  /** The topics as a JSON array text, or null for every topic. */
  topics: string | null;
  /** The batch transaction's `idle_in_transaction_session_timeout`, in ms. */
  idleTimeoutMs: number;
}

/** A failed event as the mark records it: retried at `retry_at`, or parked (`dead`). */
export interface MarkFailure {
  tenant_id: string;
  id: string;
  /** An ISO time, or 'infinity' when parked. */
  retry_at: string;
  error: string;
  dead: boolean;
}

/** What the mark settles: the published events where the claim read them, and the failures. */
export interface MarkInput {
  published: readonly { row: string; seq: string }[];
  now: Date;
  failures: readonly MarkFailure[];
}

/** Published events to mark by key (`markMoved`); `now` is unused when they are deleted. */
export interface MovedInput {
  events: readonly OutboxEvent[];
  now: Date;
}

/** Pinned to one tenant. */
interface Pinned {
  tenant: string;
}

/**
 * Channel names are identifiers (at most 63 bytes); a long schema name is hashed so the name
 * stays unique and valid.
 */
export function outboxChannel(schema: string): string {
  const plain = `idem_outbox_${schema}`;
  return plain.length <= 63
    ? plain
    : `idem_outbox_${createHash('sha256').update(schema).digest('hex').slice(0, 32)}`;
}

/** A hot statement, prepared under its old key (`idem_outbox_<key>_<hash>`). */
const prepared = <Input, R extends Row, Output>(
  key: string,
  spec: Omit<StatementSpec<Input, R, Output>, 'name'>,
) => preparedStatement('outbox', key, spec);

// jsonb is read as text and parsed by idem, so every driver yields the same values.
/** `stats`' filters: `$2` a topic, `$3` a tenant, each null for all. */
const outboxFilter = '($2::text IS NULL OR aggregatetype = $2) AND ($3::text IS NULL OR tenant_id = $3)';

const eventColumns = `tenant_id, id, aggregatetype, aggregateid, type, payload::text AS payload, headers::text AS headers, intent, traceparent, created_at, attempts`;

/** $1 tenant, $2 id, $3 topic, $4 key, $5 type, $6 payload json text, $7 headers json text. */
const eventParams = (e: EventRow) => [e.tenant, e.id, e.topic, e.key, e.type, e.payload, e.headers];

/** The causation columns, last: `add` $10–$11, `addWithoutNotify` $9–$10. */
const causeParams = (e: EventRow) => [e.intent, e.traceparent];

/**
 * $1 of `addMany`: the events as one JSON array of [tenant, id, topic, key, type, payload, headers,
 * intent, traceparent].
 */
function eventsJson(events: readonly EventRow[]): string {
  const rows = events.map(
    (e) =>
      `[${JSON.stringify(e.tenant)},${JSON.stringify(e.id)},${JSON.stringify(e.topic)},${JSON.stringify(e.key)},${JSON.stringify(e.type)},${e.payload},${e.headers},${JSON.stringify(e.intent)},${JSON.stringify(e.traceparent)}]`,
  );
  return `[${rows.join(',')}]`;
}

/** $1 of `markMoved`: the events as a JSON array of {tenant_id, id}. */
const movedJson = (events: readonly OutboxEvent[]) =>
  JSON.stringify(events.map((e) => ({ tenant_id: e.tenant ?? '', id: e.id })));

/**
 * The outbox's SQL, rendered once per schema. One statement per hot path step. Statements about
 * known events name their tenant (the primary key is (tenant_id, id)); the dispatcher's scans come
 * in two forms: across every tenant (the default) and pinned to one tenant (`…Tenant`, used by a
 * dispatcher with the `tenants` option), which is what a database distributed by tenant needs.
 *
 * The hot statements (adds, claims, marks) are named: node-postgres then parses and plans each
 * once per connection (the claim's planning alone is ~1–2 ms of a batch's CPU). The hash ties a
 * name to its text.
 */
export function renderOutboxStatements(schema: string) {
  const s = quoteSchema(schema);
  const channel = outboxChannel(schema);
  const insertColumns = `INSERT INTO ${s}.outbox (tenant_id, id, aggregatetype, aggregateid, type, payload, headers, created_at, available_at, intent, traceparent)`;
  // Arrays travel as one JSON text parameter: every adapter passes text through unchanged, while
  // some (Drizzle) expand array parameters into lists.
  const manyRows = `SELECT u.r->>0, (u.r->>1)::uuid, u.r->>2, u.r->>3, u.r->>4, u.r->5, u.r->6, $2::timestamptz, $2::timestamptz, u.r->>7, u.r->>8
    FROM jsonb_array_elements($1::text::jsonb) WITH ORDINALITY AS u(r, ord)`;
  // Short autocommit deletes of a bounded batch; SKIP LOCKED so cleanup never waits on a
  // dispatcher and two cleanups never collide. The rows are addressed by ctid: they are locked,
  // so they cannot move before the DELETE reaches them.
  const cleanup = (due: string, pin: string) => `DELETE FROM ${s}.outbox WHERE ${pin}ctid = ANY(ARRAY(
        SELECT ctid FROM ${s}.outbox WHERE ${pin}${due} LIMIT $2 FOR UPDATE SKIP LOCKED))`;
  const claimParams = (c: ClaimInput) => [c.now, c.limit, c.topics, String(c.idleTimeoutMs)];
  const markParams = (m: MarkInput) => [markedRows(m.published), m.now, JSON.stringify(m.failures)];
  const redriveParams = (r: RedriveInput) => [r.now, r.id, r.topic, r.key, channel];
  const mark = (key: string, text: string) =>
    prepared(key, { text, params: markParams, result: firstRow<MarkedRow> });
  const markTenant = (key: string, text: string) =>
    prepared(key, {
      text,
      params: (m: MarkInput & Pinned) => [...markParams(m), m.tenant],
      result: firstRow<MarkedRow>,
    });
  return {
    /** The LISTEN/NOTIFY channel producers notify at commit and dispatchers listen on. */
    channel,
    /**
     * Adds one event ($1–$7, `eventParams`; $8 now, $9 the channel). The NOTIFY rides in the
     * INSERT (no extra round trip) and is delivered at COMMIT, so a dispatcher never wakes for an
     * event it cannot see yet. PostgreSQL folds identical notifications of one transaction into
     * one. `::text::jsonb`: the driver sends text, which stops drivers that JSON-encode jsonb
     * parameters (postgres.js) from encoding it twice.
     */
    add: prepared('add', {
      text: `${insertColumns}
      SELECT $1, $2::uuid, $3, $4, $5, $6::text::jsonb, $7::text::jsonb, $8::timestamptz, $8::timestamptz, $10, $11
      FROM (SELECT pg_notify($9, $3)) AS n`,
      params: ({ event, now }: { event: EventRow; now: Date }) => [
        ...eventParams(event),
        now,
        channel,
        ...causeParams(event),
      ],
      result: nothing,
    }),
    /** `add` without the NOTIFY (`notify: false`). */
    addWithoutNotify: prepared('addWithoutNotify', {
      text: `${insertColumns}
      VALUES ($1, $2::uuid, $3, $4, $5, $6::text::jsonb, $7::text::jsonb, $8::timestamptz, $8::timestamptz, $9, $10)`,
      params: ({ event, now }: { event: EventRow; now: Date }) => [
        ...eventParams(event),
        now,
        ...causeParams(event),
      ],
      result: nothing,
    }),
    /**
     * Adds many events: $1 JSON array of `eventsJson` rows; $2
     * now; $3 channel. ORDER BY ord: identity values (the per-key order) follow the order of the
     * array.
     */
    addMany: prepared('addMany', {
      text: `WITH n AS (
        SELECT count(pg_notify($3, d.t)) FROM (SELECT DISTINCT r->>2 AS t FROM jsonb_array_elements($1::text::jsonb) AS r) AS d
      )
      ${insertColumns} ${manyRows} CROSS JOIN n ORDER BY u.ord`,
      params: ({ events, now }: { events: readonly EventRow[]; now: Date }) => [
        eventsJson(events),
        now,
        channel,
      ],
      result: nothing,
    }),
    /** `addMany` without the NOTIFY. */
    addManyWithoutNotify: prepared('addManyWithoutNotify', {
      text: `${insertColumns} ${manyRows} ORDER BY u.ord`,
      params: ({ events, now }: { events: readonly EventRow[]; now: Date }) => [eventsJson(events), now],
      result: nothing,
    }),
    /**
     * $1 now, $2 batch size, $3 topics (JSON array text, or null), $4 idle-in-transaction timeout
     * (ms, text). Locks key heads, returns their runs, and sets the transaction's settings (see
     * `claimStatement`).
     */
    claim: prepared('claim', {
      text: claimStatement(s, null),
      params: claimParams,
      result: allRows<ClaimedRow>,
    }),
    /** `claim` of one tenant: $5 tenant. */
    claimTenant: prepared('claimTenant', {
      text: claimStatement(s, '$5'),
      params: (c: ClaimInput & Pinned) => [...claimParams(c), c.tenant],
      result: allRows<ClaimedRow>,
    }),
    /**
     * $1 the published events (JSON text of {rows, n, sum}: the ctids the claim returned them at
     * (`row`), how many, and the sum of their `seq`), $2 now, $3 failures (JSON array of {tenant_id,
     * id, retry_at, error, dead}). Marks successes published, failures retried or dead, and holds
     * back the failed keys' later events. Returns `failed`, and `marked`: null when the rows it found
     * at those ctids are the batch's (same count, same sum of seq), else the JSON text of the
     * [tenant, id] pairs it found there (see `markStatement`).
     */
    mark: mark('mark', markStatement(s, false, null)),
    /** `mark` of one tenant's events: $4 tenant. */
    markTenant: markTenant('markTenant', markStatement(s, false, '$4')),
    /** Like `mark`, but deletes published rows at once (retention 0). */
    markDeleting: mark('markDeleting', markStatement(s, true, null)),
    markDeletingTenant: markTenant('markDeletingTenant', markStatement(s, true, '$4')),
    /**
     * $1 published events the mark did not find at their ctid (JSON array of {tenant_id, id}), $2
     * now. Marks them published by key, if still pending.
     */
    markMoved: defineStatement({
      text: markMovedStatement(s, false, null),
      params: (m: MovedInput) => [movedJson(m.events), m.now],
      result: nothing,
    }),
    /** `markMoved` of one tenant's events: $3 tenant. */
    markMovedTenant: defineStatement({
      text: markMovedStatement(s, false, '$3'),
      params: (m: MovedInput & Pinned) => [movedJson(m.events), m.now, m.tenant],
      result: nothing,
    }),
    /** Like `markMoved`, but deletes them (retention 0): $1 the events, and `…Tenant` $2 tenant. */
    markMovedDeleting: defineStatement({
      text: markMovedStatement(s, true, null),
      params: (m: MovedInput) => [movedJson(m.events)],
      result: nothing,
    }),
    markMovedDeletingTenant: defineStatement({
      text: markMovedStatement(s, true, '$2'),
      params: (m: MovedInput & Pinned) => [movedJson(m.events), m.tenant],
      result: nothing,
    }),
    /**
     * $1 now, $2 id, $3 topic, $4 key, $5 channel. Revives dead events and the events parked behind
     * them, in every tenant.
     */
    redrive: defineStatement({
      text: redriveStatement(s, null),
      params: redriveParams,
      result: firstRow<Record<string, unknown>>,
    }),
    /** `redrive` in one tenant: $6 tenant. */
    redriveTenant: defineStatement({
      text: redriveStatement(s, '$6'),
      params: (r: RedriveInput & Pinned) => [...redriveParams(r), r.tenant],
      result: firstRow<Record<string, unknown>>,
    }),
    /** $1 cutoff, $2 batch size. Deletes published rows older than the cutoff. */
    cleanup: sweepStatement(cleanup('published_at < $1 ORDER BY published_at', '')),
    /** `cleanup` of one tenant: $3 tenant. */
    cleanupTenant: tenantSweepStatement(
      cleanup('published_at < $1 ORDER BY published_at', 'tenant_id = $3 AND '),
    ),
    /** $1 cutoff, $2 batch size. For CDC (Debezium) setups: deletes any row older than the cutoff. */
    cleanupCaptured: sweepStatement(cleanup('created_at < $1 AND dead_at IS NULL', '')),
    cleanupCapturedTenant: tenantSweepStatement(
      cleanup('created_at < $1 AND dead_at IS NULL', 'tenant_id = $3 AND '),
    ),
    /**
     * $1 now, $2 topic or null, $3 tenant or null. Counts by state: the snapshot's outbox counts
     * (observability/snapshot.ts: the console's and the gauges' definitions), filtered by topic and
     * tenant, plus the published rows kept.
     */
    stats: defineStatement({
      text: `${snapshotStatement(s, ['outbox'], outboxFilter)},
  (SELECT count(*) FROM ${s}.outbox WHERE published_at IS NOT NULL AND ${outboxFilter}) AS "outbox.published"`,
      params: (f: { now: Date; topic: string | null; tenant: string | null }) => [f.now, f.topic, f.tenant],
      result: firstRow<Record<string, unknown>>,
    }),
    /** $1 tenant, $2 id. One event with its bookkeeping. */
    read: defineStatement({
      text: `SELECT ${eventColumns}, seq, available_at, last_error, published_at, dead_at FROM ${s}.outbox
      WHERE tenant_id = $1 AND id = $2`,
      params: ({ tenant, id }: { tenant: string; id: string }) => [tenant, id],
      result: firstRow<Record<string, unknown>>,
    }),
    /** $1 limit, $2 topic or null, $3 tenant or null. Dead events, oldest first. */
    listDead: defineStatement({
      text: `SELECT ${eventColumns}, seq, available_at, last_error, published_at, dead_at FROM ${s}.outbox
      WHERE dead_at IS NOT NULL AND ($2::text IS NULL OR aggregatetype = $2) AND ($3::text IS NULL OR tenant_id = $3)
      ORDER BY dead_at LIMIT $1`,
      params: (f: { limit: number; topic: string | null; tenant: string | null }) => [
        f.limit,
        f.topic,
        f.tenant,
      ],
      result: allRows<Record<string, unknown>>,
    }),
    /**
     * The LISTEN self-test's notification (see listener.ts), sent through `sql` the way producers
     * notify: a pooler between them and the listener is exactly what the test must catch.
     */
    selfTest: defineStatement({
      text: 'SELECT pg_notify($1, $2)',
      params: ({ payload }: { payload: string }) => [channel, payload],
      result: nothing,
    }),
  };
}

/** Which dead events `redrive` revives: each filter null for any. */
export interface RedriveInput {
  now: Date;
  id: string | null;
  topic: string | null;
  key: string | null;
}

/** What the mark answers (see `mark`). */
export interface MarkedRow {
  failed: number;
  marked: string | null;
}

export type OutboxStatements = ReturnType<typeof renderOutboxStatements>;

function redriveStatement(s: string, pin: Pin): string {
  return `WITH revived AS (
        UPDATE ${s}.outbox SET dead_at = NULL, attempts = 0, available_at = $1
        WHERE ${pin === null ? '' : `tenant_id = ${pin} AND `}dead_at IS NOT NULL AND published_at IS NULL
          AND ($2::uuid IS NULL OR id = $2) AND ($3::text IS NULL OR aggregatetype = $3)
          AND ($4::text IS NULL OR aggregateid = $4)
        RETURNING tenant_id, aggregatetype, aggregateid, seq
      ), released AS (
        UPDATE ${s}.outbox o SET available_at = $1 FROM revived r
        WHERE ${sameTenant(pin, 'o', 'r')} AND o.published_at IS NULL AND o.dead_at IS NULL
          AND o.aggregatetype = r.aggregatetype AND o.aggregateid = r.aggregateid AND o.seq > r.seq
          AND o.available_at > $1
        RETURNING 1
      )
      SELECT (SELECT count(*) FROM revived)::int AS revived, (SELECT count(*) FROM released)::int AS released,
        (SELECT count(pg_notify($5, t)) FROM (SELECT DISTINCT aggregatetype AS t FROM revived) AS d) AS notified`;
}
