/** Keyed requests: the list with its filters, and one request with its stored response and steps. */
import type { Queryable } from '../../core/sql.js';
import { ageMs, iso, num, str, text, type ConsoleDatabase } from '../database.js';
import {
  decodeCursor,
  duration,
  encodeCursor,
  limit,
  oneOf,
  optionalName,
  requiredName,
  type Query,
} from '../params.js';
import { parseJsonText, previewBytes, previewText, type BodyPreview } from '../preview.js';
import { redactHeaders } from '../redact.js';

export const requestStates = ['pending', 'completed', 'failed', 'stuck'] as const;

/** One row of the requests list. */
export interface RequestSummary {
  tenant: string;
  operation: string;
  key: string;
  state: 'pending' | 'completed' | 'failed';
  /** Pending with a lapsed (or no) lease: its process died or gave up; a retry of the key resumes it. */
  stuck: boolean;
  fence: number;
  lockedUntil: string | null;
  recoveryPoint: string | null;
  createdAt: string | null;
  ageMs: number | null;
  completedAt: string | null;
  expiresAt: string | null;
  /** HTTP status of a stored response, when the HTTP integration wrote the row. */
  status: number | null;
  bodyBytes: number | null;
}

export interface RequestList {
  rows: RequestSummary[];
  /** Pass as `cursor` for the next page; null on the last page. */
  next: string | null;
}

/**
 * Lists requests, newest first. Every filter is an exact, parameterised match; `olderThan` and
 * `newerThan` are ages relative to the console's clock.
 */
export async function listRequests(db: ConsoleDatabase, query: Query): Promise<RequestList> {
  const tenant = optionalName(query, 'tenant');
  const operation = optionalName(query, 'operation');
  const state = oneOf(query, 'state', requestStates);
  const olderThan = duration(query, 'olderThan');
  const newerThan = duration(query, 'newerThan');
  const cursor = decodeCursor(query);
  const max = limit(query);
  const now = db.clock.now();
  const rows = await db.read((tx) =>
    db.statements.requests.list(tx, {
      now: new Date(now),
      tenant,
      operation,
      state: state === 'stuck' ? undefined : state,
      stuckOnly: state === 'stuck',
      createdBefore: olderThan === undefined ? undefined : new Date(now - olderThan),
      createdAfter: newerThan === undefined ? undefined : new Date(now - newerThan),
      after: cursor,
      // One row past the page tells whether there is a next one.
      limit: max + 1,
    }),
  );
  const page = rows.slice(0, max);
  const last = page[page.length - 1];
  return {
    rows: page.map((r) => ({
      tenant: text(r.tenant_id),
      operation: text(r.operation),
      key: text(r.idempotency_key),
      state: r.state as RequestSummary['state'],
      stuck: r.stuck === true,
      fence: num(r.fence),
      lockedUntil: iso(r.locked_until),
      recoveryPoint: str(r.recovery_point),
      createdAt: iso(r.created_at),
      ageMs: ageMs(r.created_at, now),
      completedAt: iso(r.completed_at),
      expiresAt: iso(r.expires_at),
      status: r.status === null || r.status === undefined ? null : Number(r.status),
      bodyBytes: r.body_bytes === null || r.body_bytes === undefined ? null : Number(r.body_bytes),
    })),
    next:
      rows.length > max && last
        ? encodeCursor({
            createdAt: text(last.cursor_at),
            tenant: text(last.tenant_id),
            operation: text(last.operation),
            key: text(last.idempotency_key),
          })
        : null,
  };
}

/** A stored HTTP response, decoded. */
export interface StoredHttpResponse {
  status: number;
  /** Sensitive headers (cookies, tokens, signatures) are redacted. */
  headers: [string, string][];
}

export interface RequestDetail extends RequestSummary {
  fingerprint: string;
  /** The lease: `held` while `lockedUntil` is in the future, `lapsed` after, `none` when unset. */
  lease: 'held' | 'lapsed' | 'none';
  leaseRemainingMs: number | null;
  resource: { type: string; id: string } | null;
  tombstoneUntil: string | null;
  /** The stored `result` column: pretty JSON text when it parses (an HTTP response's, redacted). */
  result: BodyPreview | null;
  /** Set when `result` is the HTTP integration's stored response. */
  response: StoredHttpResponse | null;
  /** The stored `body` bytes: text when UTF-8, else a hex dump. */
  body: BodyPreview | null;
  steps: { step: string; fence: number; completedAt: string | null; result: BodyPreview | null }[];
  /** A multi-step operation that failed for good: the error, as stored (never sent to clients). */
  error: string | null;
  /** The step it failed at. */
  errorStep: string | null;
  /**
   * A pending defined operation (`idem.define`): what the completer has done with it. Null for
   * other operations, and once it ended.
   */
  completion: {
    attempts: number;
    lastError: string | null;
    nextAttemptAt: string | null;
    /** An operator's decision waiting for the completer: `compensate` or `fail`. */
    giveUp: string | null;
  } | null;
}

export async function readRequest(db: ConsoleDatabase, query: Query): Promise<RequestDetail | null> {
  const key = {
    tenant: requiredName(query, 'tenant'),
    operation: requiredName(query, 'operation'),
    key: requiredName(query, 'key'),
  };
  const { requests } = db.statements;
  const now = db.clock.now();
  return db.read(async (tx: Queryable) => {
    const r = await requests.request(tx, key);
    if (!r) return null;
    const steps = await requests.steps(tx, key);
    const intent = await requests.intent(tx, key);
    const lockedUntil = iso(r.locked_until);
    const leaseEnd = lockedUntil === null ? null : Date.parse(lockedUntil);
    const state = r.state as RequestSummary['state'];
    const response = httpResponse(r.result as string | null);
    return {
      tenant: text(r.tenant_id),
      operation: text(r.operation),
      key: text(r.idempotency_key),
      state,
      stuck: state === 'pending' && (leaseEnd === null || leaseEnd <= now),
      fence: num(r.fence),
      lockedUntil,
      lease: leaseEnd === null ? 'none' : leaseEnd > now ? 'held' : 'lapsed',
      leaseRemainingMs: leaseEnd === null ? null : leaseEnd - now,
      recoveryPoint: str(r.recovery_point),
      createdAt: iso(r.created_at),
      ageMs: ageMs(r.created_at, now),
      completedAt: iso(r.completed_at),
      expiresAt: iso(r.expires_at),
      tombstoneUntil: iso(r.tombstone_until),
      fingerprint: text(r.fingerprint),
      resource:
        r.resource_type !== null && r.resource_id !== null
          ? { type: text(r.resource_type), id: text(r.resource_id) }
          : null,
      status: response?.status ?? null,
      bodyBytes: r.body_bytes === null ? null : Number(r.body_bytes),
      // An HTTP response's result carries its headers: shown only in their redacted form.
      result: previewText(response ? JSON.stringify({ v: 1, ...response }) : (r.result as string | null)),
      response,
      body: previewBytes(r.body as Uint8Array | null),
      error: str(r.error),
      errorStep: str(r.error_step),
      completion: intent
        ? {
            attempts: num(intent.attempts),
            lastError: str(intent.last_error),
            nextAttemptAt: iso(intent.next_attempt_at),
            giveUp: str(intent.give_up),
          }
        : null,
      steps: steps.map((s) => ({
        step: text(s.step),
        fence: num(s.fence),
        completedAt: iso(s.completed_at),
        result: previewText(s.result as string | null),
      })),
    };
  });
}

/** The HTTP integration stores `{ v: 1, status, headers }` in `result` and the bytes in `body`. */
function httpResponse(result: string | null): StoredHttpResponse | null {
  const meta = parseJsonText(result) as { v?: unknown; status?: unknown; headers?: unknown } | null;
  if (!meta || meta.v !== 1 || typeof meta.status !== 'number' || !Array.isArray(meta.headers)) return null;
  return { status: meta.status, headers: redactHeaders(meta.headers) };
}
