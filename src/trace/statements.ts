/**
 * The reads of an intent's timeline (`createTrace`): one statement per table, each by the intent's
 * reference through its partial hash index (migration 0011), or by the intent's primary key. They
 * run for an operator, not on a hot path, so they are sent unnamed.
 */
import { quoteSchema } from '../core/schema-name.js';
import { allRows, defineStatement, firstRow } from '../core/statement.js';
import type { OperationScope } from '../core/errors.js';

/** A row as the driver returns it. */
export type TraceRow = Record<string, unknown>;

/** An intent: its names and its reference (`intentRef`). */
export interface IntentInput {
  scope: OperationScope;
  ref: string;
}

const names = ({ scope }: IntentInput) => [scope.tenant, scope.operation, scope.key];
const byRef = ({ ref }: IntentInput) => [ref];

/** The statements of `createTrace`, rendered for one schema. */
export function renderTraceStatements(schema: string) {
  const s = quoteSchema(schema);
  const key = 'tenant_id = $1 AND operation = $2 AND idempotency_key = $3';
  /** The `columns` of the rows of `table` whose `column` names the intent (its reference). */
  const naming = (table: string, column: string, columns: string) =>
    defineStatement({
      text: `SELECT ${columns}
      FROM ${s}.${table} WHERE ${column} = $1`,
      params: byRef,
      result: allRows<TraceRow>,
    });
  return {
    /** The intent's own row. */
    request: defineStatement({
      text: `SELECT state, fence, recovery_point, error, error_step, created_at, completed_at, caused_by, traceparent
      FROM ${s}.requests WHERE ${key}`,
      params: names,
      result: firstRow<TraceRow>,
    }),
    /** Its steps and calls. */
    steps: defineStatement({
      text: `SELECT step, kind, derived_key, fence, started_at, completed_at, traceparent, result IS NOT NULL AS recorded
      FROM ${s}.steps WHERE ${key}`,
      params: names,
      result: allRows<TraceRow>,
    }),
    /** Intents started on its behalf (a consumer's or a task's handler, a step's body). */
    caused: naming(
      'requests',
      'caused_by',
      'tenant_id, operation, idempotency_key, state, created_at, completed_at, traceparent',
    ),
    outbox: naming(
      'outbox',
      'intent',
      `tenant_id, id::text AS id, aggregatetype, aggregateid, type, created_at, attempts, last_error,
        published_at, dead_at, traceparent`,
    ),
    inbox: naming(
      'inbox',
      'intent',
      'tenant_id, consumer, message_id, state, attempts, duplicates, last_error, processed_at, traceparent',
    ),
    tasks: naming(
      'tasks',
      'intent',
      `tenant_id, id::text AS id, queue, dedupe_key, state, attempts, max_attempts, last_error,
        created_at, finished_at, traceparent`,
    ),
    /** Sagas started on its behalf, or the saga that is the intent itself (tenant, saga, key). */
    sagas: defineStatement({
      text: `SELECT tenant_id, saga, saga_key, status, created_at, finished_at, traceparent
      FROM ${s}.sagas WHERE intent = $4 OR (tenant_id = $1 AND saga = $2 AND saga_key = $3)`,
      params: (input: IntentInput) => [...names(input), input.ref],
      result: allRows<TraceRow>,
    }),
    sagaSteps: defineStatement({
      text: `SELECT position, name, state, action_key, compensation_key, compensation_attempts, registered_at,
        done_at, compensated_at
      FROM ${s}.saga_steps WHERE tenant_id = $1 AND saga = $2 AND saga_key = $3 ORDER BY position`,
      params: (saga: { tenant: string; saga: string; key: string }) => [saga.tenant, saga.saga, saga.key],
      result: allRows<TraceRow>,
    }),

    /**
     * Reverse lookup of a message id: the intent an outbox event or an inbox record names. With a
     * tenant, a primary-key lookup; without one, a scan of the tables (for tools, not hot paths).
     */
    messageIntent: defineStatement({
      text: `SELECT intent FROM (
        SELECT intent, 0 AS rank FROM ${s}.outbox
        WHERE id::text = $1 AND ($2::text IS NULL OR tenant_id = $2) AND intent IS NOT NULL
        UNION ALL
        SELECT intent, 1 FROM ${s}.inbox
        WHERE message_id = $1 AND ($2::text IS NULL OR tenant_id = $2) AND intent IS NOT NULL
      ) AS found ORDER BY rank LIMIT 1`,
      params: (m: { id: string; tenant: string | null }) => [m.id, m.tenant],
      result: firstRow<{ intent: string }>,
    }),
    /** Reverse lookup of a derived key: the intent of the step or call that sent it, or the saga's. */
    derivedKeyIntent: defineStatement({
      text: `SELECT tenant_id, operation, idempotency_key, NULL AS intent FROM ${s}.steps WHERE derived_key = $1
      UNION ALL
      SELECT g.tenant_id, g.saga, g.saga_key, g.intent FROM ${s}.saga_steps t
      JOIN ${s}.sagas g ON g.tenant_id = t.tenant_id AND g.saga = t.saga AND g.saga_key = t.saga_key
      WHERE t.action_key = $1 OR t.compensation_key = $1
      LIMIT 1`,
      params: ({ key }: { key: string }) => [key],
      result: firstRow<TraceRow>,
    }),
  };
}

export type TraceStatements = ReturnType<typeof renderTraceStatements>;
