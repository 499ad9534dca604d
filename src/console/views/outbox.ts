/** The outbox: backlog and lag per topic, events that keep failing, dead letters, and redrive. */
import { withCausationHeaders } from '../../core/causation.js';
import { InvalidArgumentError } from '../../core/errors.js';
import {
  createOutbox,
  type OutboxStats,
  type RedriveFilter,
  type RedriveResult,
} from '../../outbox/outbox.js';
import { ageMs, intentOf, iso, num, readPage, str, text } from '../database.js';
import type { ConsoleDatabase, ConsoleIntent } from '../database.js';
import { InvalidParameterError, optionalName, type Query } from '../params.js';
import { previewText, type BodyPreview } from '../preview.js';
import { redactHeaders } from '../redact.js';
import type { OutboxEventRow } from '../statements/outbox.js';

export interface OutboxEventView {
  id: string;
  topic: string;
  key: string;
  type: string;
  attempts: number;
  lastError: string | null;
  createdAt: string | null;
  ageMs: number | null;
  /** Next attempt; null while parked behind a dead event of its key. */
  availableAt: string | null;
  deadAt: string | null;
  headers: [string, string][];
  payload: BodyPreview | null;
  /** The intent it was written on behalf of (`#/trace` shows its timeline), or null. */
  intent: ConsoleIntent | null;
}

export interface OutboxView {
  stats: OutboxStats;
  topics: { topic: string; pending: number; dead: number; oldestPendingAgeMs: number | null }[];
  dead: OutboxEventView[];
  /** Pending events with at least one failed attempt. */
  retrying: OutboxEventView[];
}

export async function readOutbox(db: ConsoleDatabase, query: Query): Promise<OutboxView> {
  const topic = optionalName(query, 'topic');
  const { outbox } = db.statements;
  return readPage(db, query, async (tx, { max, now }) => {
    const stats = await createOutbox({ sql: tx, schema: db.schema, clock: db.clock }).stats(
      topic === undefined ? {} : { topic },
    );
    const topics = await outbox.topics(tx, { topic });
    const dead = await outbox.dead(tx, { topic, limit: max });
    const retrying = await outbox.retrying(tx, { topic, limit: max });
    const event = (r: OutboxEventRow): OutboxEventView => ({
      id: text(r.id),
      topic: text(r.aggregatetype),
      key: text(r.aggregateid),
      type: text(r.type),
      attempts: num(r.attempts),
      lastError: str(r.last_error),
      createdAt: iso(r.created_at),
      ageMs: ageMs(r.created_at, now),
      availableAt: iso(r.available_at),
      deadAt: iso(r.dead_at),
      intent: intentOf(r.intent),
      headers: redactHeaders(publishedHeaders(r)),
      payload: previewText(r.payload as string | null),
    });
    return {
      stats,
      topics: topics.map((r) => ({
        topic: text(r.topic),
        pending: num(r.pending),
        dead: num(r.dead),
        oldestPendingAgeMs: ageMs(r.oldest, now),
      })),
      dead: dead.map(event),
      retrying: retrying.map(event),
    };
  });
}

/**
 * Revives dead events through the outbox's own `redrive` (attempts reset, the events parked
 * behind them released, dispatchers notified). Reviving every dead event needs `all: true`, so
 * an empty body never redrives the world by accident.
 */
export async function redriveOutbox(db: ConsoleDatabase, body: unknown): Promise<RedriveResult> {
  const input = (body ?? {}) as Record<string, unknown>;
  if (typeof input !== 'object' || Array.isArray(input))
    throw new InvalidArgumentError('body must be an object');
  for (const field of Object.keys(input)) {
    if (!['id', 'topic', 'key', 'all'].includes(field)) {
      throw new InvalidParameterError(field, 'is not a field of a redrive (id, topic, key, all)');
    }
  }
  const filter: RedriveFilter = {};
  for (const field of ['id', 'topic', 'key'] as const) {
    const value = input[field];
    if (value === undefined || value === null || value === '') continue;
    filter[field] = optionalName({ [field]: value }, field);
  }
  if (input.all !== undefined && typeof input.all !== 'boolean') {
    throw new InvalidParameterError('all', 'must be true or false');
  }
  if (Object.keys(filter).length === 0 && input.all !== true) {
    throw new InvalidArgumentError('name an id, topic or key to redrive, or send { "all": true }');
  }
  return db.write(() => createOutbox({ sql: db.sql, schema: db.schema, clock: db.clock }).redrive(filter));
}

/** The headers its publisher passes on: the producer's own and its causation's (outbox.ts). */
function publishedHeaders(r: OutboxEventRow): unknown {
  const stored = parseObject(r.headers);
  if (stored === null || typeof stored !== 'object' || Array.isArray(stored)) return stored;
  return withCausationHeaders(stored as Record<string, string>, r.intent, r.traceparent);
}

function parseObject(value: unknown): unknown {
  if (typeof value !== 'string') return value ?? {};
  try {
    return JSON.parse(value) as unknown;
  } catch {
    return {};
  }
}
