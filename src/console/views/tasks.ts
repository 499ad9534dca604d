/** Claims (tasks): counts per queue, dead tasks, and claimed tasks whose lease lapsed. */
import { ageMs, intentOf, iso, num, readPage, str, text } from '../database.js';
import type { ConsoleDatabase, ConsoleIntent } from '../database.js';
import { optionalName, type Query } from '../params.js';
import { previewText, type BodyPreview } from '../preview.js';
import type { TaskRow } from '../statements/tasks.js';

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
  /** The intent it was written on behalf of (`#/trace` shows its timeline), or null. */
  intent: ConsoleIntent | null;
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

export async function readTasks(db: ConsoleDatabase, query: Query): Promise<TasksView> {
  const filter = { tenant: optionalName(query, 'tenant'), queue: optionalName(query, 'queue') };
  const { tasks } = db.statements;
  return readPage(db, query, async (tx, { max, now }) => {
    const at = new Date(now);
    const queues = new Map<string, { counts: Record<string, number>; oldest: number | null }>();
    for (const r of await tasks.counts(tx, { ...filter, now: at })) {
      const entry = queues.get(text(r.queue)) ?? { counts: {}, oldest: null };
      entry.counts[text(r.state)] = num(r.n);
      const oldest = ageMs(r.oldest_due, now);
      if (oldest !== null) entry.oldest = oldest;
      queues.set(text(r.queue), entry);
    }
    const dead = await tasks.dead(tx, { ...filter, limit: max });
    const stuck = await tasks.stuck(tx, { ...filter, limit: max, now: at });
    const task = (r: TaskRow): TaskView => ({
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
      intent: intentOf(r.intent),
    });
    return {
      queues: [...queues].map(([name, e]) => ({ queue: name, counts: e.counts, oldestDueAgeMs: e.oldest })),
      dead: dead.map(task),
      stuck: stuck.map(task),
    };
  });
}
