/**
 * Sagas: counts by status, stuck sagas (a compensation kept failing: an operator must act) and
 * stalled ones (running or compensating with a lapsed lease: the process died; `recover` resumes
 * them), each with its steps.
 */
import type { Queryable } from '../../core/sql.js';
import { ageMs, intentOf, iso, num, readPage, str, text } from '../database.js';
import type { ConsoleDatabase, ConsoleIntent } from '../database.js';
import { optionalName, type Query } from '../params.js';
import { previewText, type BodyPreview } from '../preview.js';
import type { SagaRow, SagaStatements } from '../statements/sagas.js';

export interface SagaView {
  tenant: string;
  saga: string;
  key: string;
  status: 'running' | 'compensating' | 'completed' | 'compensated' | 'stuck';
  cursor: number;
  fence: number;
  lockedUntil: string | null;
  error: string | null;
  stuckError: string | null;
  createdAt: string | null;
  updatedAt: string | null;
  /** Time since the last change. */
  idleMs: number | null;
  input: BodyPreview | null;
  /**
   * The intent it was started on behalf of, or else the saga itself (a saga is an intent of its
   * own: tenant, saga, key): `#/trace` shows its timeline.
   */
  intent: ConsoleIntent;
  steps: {
    position: number;
    name: string;
    state: 'registered' | 'done' | 'compensated';
    actionKey: string;
    compensationKey: string | null;
    compensationAttempts: number;
    result: BodyPreview | null;
  }[];
}

export interface SagasView {
  counts: Record<string, number>;
  stuck: SagaView[];
  stalled: SagaView[];
}

export async function readSagas(db: ConsoleDatabase, query: Query): Promise<SagasView> {
  const filter = { tenant: optionalName(query, 'tenant'), saga: optionalName(query, 'saga') };
  return readPage(db, query, async (tx, { max, now }) => {
    const { sagas } = db.statements;
    const counts = await sagas.counts(tx, filter);
    const stuck = await sagas.stuck(tx, { ...filter, limit: max });
    const stalled = await sagas.stalled(tx, { ...filter, limit: max, now: new Date(now) });
    return {
      counts: Object.fromEntries(counts.map((r) => [text(r.status), num(r.n)])),
      stuck: await withSteps(tx, sagas, now, stuck),
      stalled: await withSteps(tx, sagas, now, stalled),
    };
  });
}

/** The listed sagas, each with its steps: one read for every listed saga's steps. */
async function withSteps(
  tx: Queryable,
  statements: SagaStatements,
  now: number,
  rows: SagaRow[],
): Promise<SagaView[]> {
  if (rows.length === 0) return [];
  const steps = await statements.steps(tx, { sagas: rows });
  const byRef = new Map<string, SagaView['steps']>();
  for (const s of steps) {
    const ref = JSON.stringify([s.tenant_id, s.saga, s.saga_key]);
    const list = byRef.get(ref) ?? [];
    list.push({
      position: num(s.position),
      name: text(s.name),
      state: s.state as SagaView['steps'][number]['state'],
      actionKey: text(s.action_key),
      compensationKey: str(s.compensation_key),
      compensationAttempts: num(s.compensation_attempts),
      result: previewText((s.compensation_result ?? s.result) as string | null),
    });
    byRef.set(ref, list);
  }
  return rows.map((r) => ({
    tenant: text(r.tenant_id),
    saga: text(r.saga),
    key: text(r.saga_key),
    status: r.status as SagaView['status'],
    cursor: num(r.cursor),
    fence: num(r.fence),
    lockedUntil: iso(r.locked_until),
    error: str(r.error),
    stuckError: str(r.stuck_error),
    createdAt: iso(r.created_at),
    updatedAt: iso(r.updated_at),
    idleMs: ageMs(r.updated_at, now),
    input: previewText(r.input as string | null),
    intent: intentOf(r.intent) ?? {
      tenant: text(r.tenant_id),
      operation: text(r.saga),
      key: text(r.saga_key),
    },
    steps: byRef.get(JSON.stringify([r.tenant_id, r.saga, r.saga_key])) ?? [],
  }));
}
