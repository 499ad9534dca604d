/**
 * Sagas: counts by status, stuck sagas (a compensation kept failing: an operator must act) and
 * stalled ones (running or compensating with a lapsed lease: the process died; `recover` resumes
 * them), each with its steps.
 */
import type { Queryable } from '../../core/sql.js';
import { ageMs, iso, num, str, text, readPage, type ConsoleDatabase } from '../database.js';
import { optionalName, type Query } from '../params.js';
import { previewText, type BodyPreview } from '../preview.js';

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
  const tenant = optionalName(query, 'tenant');
  const saga = optionalName(query, 'saga');
  const filter = `($1::text IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR saga = $2)`;
  return readPage(db, query, async (tx, { max, now }) => {
    const counts = await tx.query(
      `SELECT status, count(*)::bigint AS n FROM ${db.s}.sagas WHERE ${filter} GROUP BY status`,
      [tenant ?? null, saga ?? null],
    );
    const stuck = await tx.query(
      `SELECT * FROM ${db.s}.sagas WHERE status = 'stuck' AND ${filter} ORDER BY updated_at DESC LIMIT $3`,
      [tenant ?? null, saga ?? null, max],
    );
    const stalled = await tx.query(
      `SELECT * FROM ${db.s}.sagas
        WHERE status IN ('running', 'compensating') AND (locked_until IS NULL OR locked_until <= $4) AND ${filter}
        ORDER BY updated_at LIMIT $3`,
      [tenant ?? null, saga ?? null, max, new Date(now)],
    );
    return {
      counts: Object.fromEntries(counts.rows.map((r) => [text(r.status), num(r.n)])),
      stuck: await withSteps(tx, db, now, stuck.rows),
      stalled: await withSteps(tx, db, now, stalled.rows),
    };
  });
}

async function withSteps(
  tx: Queryable,
  db: ConsoleDatabase,
  now: number,
  rows: Record<string, unknown>[],
): Promise<SagaView[]> {
  if (rows.length === 0) return [];
  // One read for every listed saga's steps.
  const steps = await tx.query(
    `SELECT s.* FROM ${db.s}.saga_steps s
      JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(tenant_id, saga, saga_key)
        ON s.tenant_id = k.tenant_id AND s.saga = k.saga AND s.saga_key = k.saga_key
      ORDER BY s.tenant_id, s.saga, s.saga_key, s.position`,
    [rows.map((r) => r.tenant_id), rows.map((r) => r.saga), rows.map((r) => r.saga_key)],
  );
  const byRef = new Map<string, SagaView['steps']>();
  for (const s of steps.rows) {
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
    steps: byRef.get(JSON.stringify([r.tenant_id, r.saga, r.saga_key])) ?? [],
  }));
}
