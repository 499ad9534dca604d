/** The sagas view's reads (views/sagas.ts): counts by status, stuck and stalled sagas, their steps. */
import { quoteSchema } from '../../core/schema-name.js';
import { allRows, defineStatement } from '../../core/statement.js';

/** A `saga_steps` row (every column), decoded by the view. */
export type SagaStepRow = Record<string, unknown>;

/** The view's filters: one tenant, one saga (definition), either or both left out for all. */
export interface SagaFilter {
  tenant?: string | undefined;
  saga?: string | undefined;
}

/** One saga instance: the primary key (tenant_id, saga, saga_key). */
export interface SagaRef {
  tenant_id: unknown;
  saga: unknown;
  saga_key: unknown;
}

/** A `sagas` row (every column), decoded by the view. */
export type SagaRow = SagaRef & Record<string, unknown>;

/** $1 tenant and $2 saga, each matching every value when null: every list's filter. */
const filter = `($1::text IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR saga = $2)`;

/**
 * The console's statements about sagas, rendered once per schema. They run rarely (an operator's
 * page), so they are sent unnamed.
 */
export function renderSagaStatements(schema: string) {
  const s = quoteSchema(schema);
  return {
    /** Sagas per status. */
    counts: defineStatement({
      text: `SELECT status, count(*)::bigint AS n FROM ${s}.sagas WHERE ${filter} GROUP BY status`,
      params: (f: SagaFilter) => [f.tenant ?? null, f.saga ?? null],
      result: allRows<{ status: unknown; n: unknown }>,
    }),

    /** Stuck sagas (a compensation kept failing), the latest first ($3 limit). */
    stuck: defineStatement({
      text: `SELECT * FROM ${s}.sagas WHERE status = 'stuck' AND ${filter} ORDER BY updated_at DESC LIMIT $3`,
      params: (p: SagaFilter & { limit: number }) => [p.tenant ?? null, p.saga ?? null, p.limit],
      result: allRows<SagaRow>,
    }),

    /** Running or compensating sagas whose lease lapsed by `now` ($4), the longest idle first ($3 limit). */
    stalled: defineStatement({
      text: `SELECT * FROM ${s}.sagas
        WHERE status IN ('running', 'compensating') AND (locked_until IS NULL OR locked_until <= $4) AND ${filter}
        ORDER BY updated_at LIMIT $3`,
      params: (p: SagaFilter & { limit: number; now: Date }) => [
        p.tenant ?? null,
        p.saga ?? null,
        p.limit,
        p.now,
      ],
      result: allRows<SagaRow>,
    }),

    /** The steps of every saga of `sagas`, in one read, each saga's in order. */
    steps: defineStatement({
      text: `SELECT s.* FROM ${s}.saga_steps s
      JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(tenant_id, saga, saga_key)
        ON s.tenant_id = k.tenant_id AND s.saga = k.saga AND s.saga_key = k.saga_key
      ORDER BY s.tenant_id, s.saga, s.saga_key, s.position`,
      params: ({ sagas }: { sagas: readonly SagaRef[] }) => [
        sagas.map((r) => r.tenant_id),
        sagas.map((r) => r.saga),
        sagas.map((r) => r.saga_key),
      ],
      result: allRows<SagaStepRow>,
    }),
  };
}

/** The sagas view's statements. */
export type SagaStatements = ReturnType<typeof renderSagaStatements>;
