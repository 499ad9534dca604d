/** The requests view's reads (views/requests.ts): the filtered list, and one request in full. */
import { quoteSchema } from '../../core/schema-name.js';
import { allRows, defineStatement, firstRow } from '../../core/statement.js';

/** A `requests` row as a statement reads it, decoded by the view. */
export type RequestRow = Record<string, unknown>;

/** One request: the primary key (tenant_id, operation, idempotency_key). */
export interface RequestKey {
  tenant: string;
  operation: string;
  key: string;
}

/** Where a page of the list starts: after this row, in the list's order. */
export interface RequestListStart {
  /** `created_at` as the database's text, so the comparison keeps its microseconds. */
  createdAt: string;
  tenant: string;
  operation: string;
  key: string;
}

/** The list's filters (each left out matches every row) and its page, as of `now`. */
export interface RequestListInput {
  now: Date;
  tenant?: string | undefined;
  operation?: string | undefined;
  /** A stored state; `stuckOnly` asks for stuck requests instead. */
  state?: 'pending' | 'completed' | 'failed' | undefined;
  /** Only pending requests with a lapsed (or no) lease. */
  stuckOnly: boolean;
  createdBefore?: Date | undefined;
  createdAfter?: Date | undefined;
  after?: RequestListStart | undefined;
  limit: number;
}

/**
 * The console's statements about keyed requests, rendered once per schema. They run rarely (an
 * operator's page), so they are sent unnamed.
 */
export function renderRequestStatements(schema: string) {
  const s = quoteSchema(schema);
  const key = (k: RequestKey) => [k.tenant, k.operation, k.key];
  return {
    /**
     * Requests newest first, with the HTTP status of a stored response and whether a pending one
     * is stuck ($1 now). Paged by keyset on (created_at, tenant, operation, key), $8–$11.
     */
    list: defineStatement({
      text: `SELECT tenant_id, operation, idempotency_key, state, fence, locked_until, recovery_point,
          created_at, created_at::text AS cursor_at, completed_at, expires_at, octet_length(body) AS body_bytes,
          CASE WHEN left(result, 8) = '{"v":1,"'
            THEN substring(result FROM '"status":([0-9]{3})') END AS status,
          (state = 'pending' AND (locked_until IS NULL OR locked_until <= $1)) AS stuck
        FROM ${s}.requests
        WHERE ($2::text IS NULL OR tenant_id = $2)
          AND ($3::text IS NULL OR operation = $3)
          AND ($4::text IS NULL OR state = $4)
          AND (NOT $5 OR (state = 'pending' AND (locked_until IS NULL OR locked_until <= $1)))
          AND ($6::timestamptz IS NULL OR created_at <= $6)
          AND ($7::timestamptz IS NULL OR created_at >= $7)
          AND ($8::timestamptz IS NULL
            OR (created_at, tenant_id, operation, idempotency_key) < ($8::timestamptz, $9, $10, $11))
        ORDER BY created_at DESC, tenant_id DESC, operation DESC, idempotency_key DESC
        LIMIT $12`,
      params: (l: RequestListInput) => [
        l.now,
        l.tenant ?? null,
        l.operation ?? null,
        l.state ?? null,
        l.stuckOnly,
        l.createdBefore ?? null,
        l.createdAfter ?? null,
        l.after?.createdAt ?? null,
        l.after?.tenant ?? null,
        l.after?.operation ?? null,
        l.after?.key ?? null,
        l.limit,
      ],
      result: allRows<RequestRow>,
    }),

    /** One request, every column and its body's size; null when there is none. */
    request: defineStatement({
      text: `SELECT *, octet_length(body) AS body_bytes FROM ${s}.requests
        WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3`,
      params: key,
      result: firstRow<RequestRow>,
    }),

    /** Its recorded steps, in the order they completed. */
    steps: defineStatement({
      text: `SELECT step, fence, completed_at, result FROM ${s}.steps
        WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3
        ORDER BY completed_at, step`,
      params: key,
      result: allRows<{ step: unknown; fence: unknown; completed_at: unknown; result: unknown }>,
    }),

    /** What the completer has done with it, when it is a defined operation's; else null. */
    intent: defineStatement({
      text: `SELECT attempts, last_error, next_attempt_at, give_up FROM ${s}.intents
        WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3`,
      params: key,
      result: firstRow<{
        attempts: unknown;
        last_error: unknown;
        next_attempt_at: unknown;
        give_up: unknown;
      }>,
    }),
  };
}

/** The requests view's statements. */
export type RequestStatements = ReturnType<typeof renderRequestStatements>;
