/** Claims (tasks): counts per queue, dead tasks, and claimed tasks whose lease lapsed. */
import { ageMs, iso, num, str, text, readPage, type ConsoleDatabase } from '../database.js';
import { optionalName, type Query } from '../params.js';
import { previewText, type BodyPreview } from '../preview.js';

export interface TaskView {
  id: string;
  tenant: string;
  queue: string;
  key: string;
  state: 'ready' | 'claimed' | 'completed' | 'dead';
  attempts: number;
  maxAttempts: number;
  fence: number;
  lockedBy: string | null;
  lastError: string | null;
  /** Due time of a ready task, or the lease's end of a claimed one. */
  visibleAt: string | null;
  createdAt: string | null;
  ageMs: number | null;
  finishedAt: string | null;
  payload: BodyPreview | null;
}

export interface TasksView {
  queues: {
    queue: string;
    counts: Record<string, number>;
    /** How long the oldest due ready task has waited. */
    oldestDueAgeMs: number | null;
  }[];
  dead: TaskView[];
  /** Claimed, lease lapsed: the worker died or hung; the next claim takes it over (fenced). */
  stuck: TaskView[];
}

const columns = `id, tenant_id, queue, dedupe_key, state, attempts, max_attempts, fence, locked_by, last_error,
  visible_at, created_at, finished_at, payload`;

export async function readTasks(db: ConsoleDatabase, query: Query): Promise<TasksView> {
  const tenant = optionalName(query, 'tenant');
  const queue = optionalName(query, 'queue');
  const filter = `($1::text IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR queue = $2)`;
  return readPage(db, query, async (tx, { max, now }) => {
    const counts = await tx.query(
      `SELECT queue, state, count(*)::bigint AS n,
          min(visible_at) FILTER (WHERE state = 'ready' AND visible_at <= $3) AS oldest_due
        FROM ${db.s}.tasks WHERE ${filter} GROUP BY queue, state ORDER BY queue, state`,
      [tenant ?? null, queue ?? null, new Date(now)],
    );
    const queues = new Map<string, { counts: Record<string, number>; oldest: number | null }>();
    for (const r of counts.rows) {
      const entry = queues.get(text(r.queue)) ?? { counts: {}, oldest: null };
      entry.counts[text(r.state)] = num(r.n);
      const oldest = ageMs(r.oldest_due, now);
      if (oldest !== null) entry.oldest = oldest;
      queues.set(text(r.queue), entry);
    }
    const dead = await tx.query(
      `SELECT ${columns} FROM ${db.s}.tasks WHERE state = 'dead' AND ${filter}
        ORDER BY finished_at DESC NULLS LAST, id DESC LIMIT $3`,
      [tenant ?? null, queue ?? null, max],
    );
    const stuck = await tx.query(
      `SELECT ${columns} FROM ${db.s}.tasks WHERE state = 'claimed' AND visible_at <= $4 AND ${filter}
        ORDER BY visible_at LIMIT $3`,
      [tenant ?? null, queue ?? null, max, new Date(now)],
    );
    const task = (r: Record<string, unknown>): TaskView => ({
      id: text(r.id),
      tenant: text(r.tenant_id),
      queue: text(r.queue),
      key: text(r.dedupe_key),
      state: r.state as TaskView['state'],
      attempts: num(r.attempts),
      maxAttempts: num(r.max_attempts),
      fence: num(r.fence),
      lockedBy: str(r.locked_by),
      lastError: str(r.last_error),
      visibleAt: iso(r.visible_at),
      createdAt: iso(r.created_at),
      ageMs: ageMs(r.created_at, now),
      finishedAt: iso(r.finished_at),
      payload: previewText(r.payload as string | null),
    });
    return {
      queues: [...queues].map(([name, e]) => ({ queue: name, counts: e.counts, oldestDueAgeMs: e.oldest })),
      dead: dead.rows.map(task),
      stuck: stuck.rows.map(task),
    };
  });
}
