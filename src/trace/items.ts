/** Rows of the trace statements as timeline items (types.ts), and their causal order. */
import { toMillis } from '../core/clock.js';
import { intentRef } from '../core/causation.js';
import type { TraceRow } from './statements.js';
import type { TimelineItem } from './types.js';

/** A driver's timestamp as ISO text, or null. */
export function iso(value: unknown): string | null {
  const ms = toMillis(value);
  return ms === null || !Number.isFinite(ms) ? null : new Date(ms).toISOString();
}

/** A text column, or null. */
const text = (value: unknown): string | null => (typeof value === 'string' ? value : null);

export function requestItem(r: TraceRow): TimelineItem {
  return {
    kind: 'request',
    at: iso(r.created_at),
    state: String(r.state),
    completedAt: iso(r.completed_at),
    fence: Number(r.fence),
    recoveryPoint: text(r.recovery_point),
    error: text(r.error),
    causedBy: text(r.caused_by),
    traceparent: text(r.traceparent),
    replays: null,
  };
}

export function stepItem(r: TraceRow): TimelineItem {
  return {
    kind: 'step',
    // A local step starts with its transaction (`started_at`: what it wrote carries the same time);
    // rows written before that was recorded have only the completion time.
    at: iso(r.started_at ?? r.completed_at),
    name: String(r.step),
    stepKind: r.kind === 'call' ? 'call' : 'local',
    derivedKey: text(r.derived_key),
    completedAt: iso(r.completed_at),
    recorded: r.recorded === true,
    fence: Number(r.fence),
    traceparent: text(r.traceparent),
  };
}

export function outboxItem(r: TraceRow): TimelineItem {
  return {
    kind: 'outbox',
    at: iso(r.created_at),
    id: String(r.id),
    tenant: String(r.tenant_id),
    topic: String(r.aggregatetype),
    orderingKey: String(r.aggregateid),
    type: String(r.type),
    publishedAt: iso(r.published_at),
    attempts: Number(r.attempts),
    lastError: text(r.last_error),
    deadAt: iso(r.dead_at),
    traceparent: text(r.traceparent),
  };
}

export function consumptionItem(r: TraceRow): TimelineItem {
  return {
    kind: 'consumption',
    at: iso(r.processed_at),
    tenant: String(r.tenant_id),
    consumer: String(r.consumer),
    messageId: String(r.message_id),
    state: String(r.state),
    attempts: Number(r.attempts),
    duplicates: Number(r.duplicates),
    lastError: text(r.last_error),
    traceparent: text(r.traceparent),
  };
}

export function taskItem(r: TraceRow): TimelineItem {
  return {
    kind: 'task',
    at: iso(r.created_at),
    tenant: String(r.tenant_id),
    id: String(r.id),
    queue: String(r.queue),
    key: String(r.dedupe_key),
    state: String(r.state),
    attempts: Number(r.attempts),
    maxAttempts: Number(r.max_attempts),
    lastError: text(r.last_error),
    finishedAt: iso(r.finished_at),
    traceparent: text(r.traceparent),
  };
}

export function sagaItem(r: TraceRow): TimelineItem {
  return {
    kind: 'saga',
    at: iso(r.created_at),
    tenant: String(r.tenant_id),
    saga: String(r.saga),
    key: String(r.saga_key),
    status: String(r.status),
    finishedAt: iso(r.finished_at),
    traceparent: text(r.traceparent),
  };
}

export function sagaStepItem(saga: { saga: string; key: string }, r: TraceRow): TimelineItem {
  return {
    kind: 'saga-step',
    at: iso(r.registered_at),
    saga: saga.saga,
    key: saga.key,
    position: Number(r.position),
    name: String(r.name),
    state: String(r.state),
    actionKey: String(r.action_key),
    compensationKey: text(r.compensation_key),
    compensationAttempts: Number(r.compensation_attempts),
    doneAt: iso(r.done_at),
    compensatedAt: iso(r.compensated_at),
  };
}

export function causedIntentItem(r: TraceRow): TimelineItem {
  const scope = {
    tenant: String(r.tenant_id),
    operation: String(r.operation),
    key: String(r.idempotency_key),
  };
  return {
    kind: 'caused-intent',
    at: iso(r.created_at),
    intent: { ...scope, ref: intentRef(scope) },
    state: String(r.state),
    completedAt: iso(r.completed_at),
    traceparent: text(r.traceparent),
  };
}

/** Of records written at one time, the one that causes the other comes first. */
const rank: Record<TimelineItem['kind'], number> = {
  request: 0,
  step: 1,
  outbox: 2,
  task: 3,
  saga: 4,
  'saga-step': 5,
  consumption: 6,
  'caused-intent': 7,
  'webhook-sent': 8,
  'webhook-attempt': 9,
  'webhook-received': 10,
};

/**
 * Causal order: the request first (everything else happened on its behalf, even a record written
 * before its row: commit-time recording inserts the row last, at COMMIT), then by time, then by
 * `rank`. The sort is stable, so rows of one kind and time keep the order they were read in.
 */
export function causalOrder(items: TimelineItem[]): TimelineItem[] {
  const time = (item: TimelineItem) => (item.at === null ? Infinity : Date.parse(item.at));
  return items.sort((a, b) => {
    if (a.kind === 'request' || b.kind === 'request') return rank[a.kind] - rank[b.kind];
    return time(a) - time(b) || rank[a.kind] - rank[b.kind];
  });
}
