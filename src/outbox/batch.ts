/**
 * One dispatcher batch, in one transaction: claim the heads of due keys and their runs, publish
 * them wave by wave, and mark the outcome. What is reported of it is reported after COMMIT.
 */
import type { Clock } from '../core/clock.js';
import type { IdemEvents } from '../core/event-channel.js';
import type { Sql, Transaction } from '../core/sql.js';
import type { ResolvedDispatcherOptions } from './dispatcher-options.js';
import { describeError } from './errors.js';
import { eventsNotMarked } from './marked.js';
import { decodeEvent } from './outbox.js';
import type { MarkFailure, OutboxStatements } from './statements.js';
import type { OutboxEvent, Publisher } from './types.js';
import { publishInWaves, type Settled } from './waves.js';

/** How long a batch's transaction may idle beyond `publishTimeoutMs` (its mark's own time). */
const idleMarginMs = 5_000;

/** What one batch did. */
export interface BatchResult {
  /** Events read and locked. */
  claimed: number;
  published: number;
  /** Failed and scheduled for a retry. */
  retried: number;
  /** Failed and parked as dead. */
  dead: number;
  /** Not attempted: behind a failure of their key, or after a transport failure. */
  skipped: number;
  /** Later events of waiting keys pushed back by the scan. */
  held: number;
  /** Set when the publisher could not reach its destination. */
  outage?: unknown;
}

/** A batch of nothing yet, to add results to. */
export const emptyBatch = (): BatchResult => ({
  claimed: 0,
  published: 0,
  retried: 0,
  dead: 0,
  skipped: 0,
  held: 0,
});

/** Adds `result`'s counts to `total`. */
export function addBatch(total: BatchResult, result: BatchResult): void {
  for (const field of ['claimed', 'published', 'retried', 'dead', 'skipped', 'held'] as const) {
    total[field] += result[field];
  }
}

/** What a batch needs from its dispatcher (resolved options and where to report). */
export interface BatchContext {
  sql: Sql;
  clock: Clock;
  statements: OutboxStatements;
  publisher: Publisher;
  events: IdemEvents;
  settings: Pick<
    ResolvedDispatcherOptions,
    'topicsJson' | 'batchSize' | 'maxAttempts' | 'backoff' | 'publishTimeoutMs' | 'retentionMs'
  >;
  /** Hears a publish call that threw or timed out. */
  onOutage: (error: unknown) => void;
  /** Hears the time of each retry the batch scheduled. */
  onRetry: (at: number) => void;
}

interface DeadEvent {
  event: OutboxEvent;
  error: string;
}

interface RetriedEvent {
  event: OutboxEvent;
  error: string;
  retryInMs: number;
}

/** A batch's outcome, reported once its transaction committed. */
interface Outcome {
  result: BatchResult;
  published: OutboxEvent[];
  retried: RetriedEvent[];
  dead: DeadEvent[];
}

/**
 * One batch of one tenant (`tenant`), or across every tenant (null).
 *
 * This transaction (one pooled connection, the row locks on the batch's key heads) stays open
 * while the publisher talks to the broker: on purpose (see `OutboxDispatcher.runOnce`).
 */
export async function runBatch(batch: BatchContext, tenant: string | null): Promise<BatchResult> {
  const outcome = await batch.sql.transaction(async (tx) => {
    const now = batch.clock.now();
    // The claim also sets two transaction-local settings (one round trip fewer per batch):
    // idle_in_transaction_session_timeout, so a dispatcher stuck while holding head locks
    // (frozen process, half-open network) cannot park its keys forever; and synchronous_commit
    // off: this transaction only writes marks, and if the server loses the last commits in a
    // crash those events are published again and consumers dedupe them, the same as a
    // dispatcher crash before marking. Measured: commit 7–24 ms → under 1 ms per 500 events.
    const claim = {
      now: new Date(now),
      limit: batch.settings.batchSize,
      topics: batch.settings.topicsJson,
      // The transaction idles while the broker confirms, at most publishTimeoutMs; 5 s more is
      // the mark's own time. (It was 30 s more: behind a partition that never healed, a
      // batch's head locks stayed a minute; now publishTimeoutMs + 5 s, 35 s by default.)
      idleTimeoutMs: Math.ceil(batch.settings.publishTimeoutMs + idleMarginMs),
    };
    const rows =
      tenant === null
        ? await batch.statements.claim(tx, claim)
        : await batch.statements.claimTenant(tx, { ...claim, tenant });
    const held = Number(rows[0]?.held ?? 0);
    const claimed = rows.filter((row) => row.id !== null && row.id !== undefined);
    const events = claimed.map(decodeEvent);
    const result: BatchResult = { ...emptyBatch(), claimed: events.length, held };
    if (events.length === 0) return { result, published: [], retried: [], dead: [] };
    // Where the claim read each event, and its seq: the mark finds published events by the first
    // and checks what it found by the second (see markStatement). By event, not by id: two
    // tenants' events may share an id.
    const rowOf = new Map(
      events.map((event, i) => [event, { row: claimed[i]!.row, seq: String(claimed[i]!.seq) }]),
    );

    const settled = await publishInWaves(
      batch.publisher,
      events,
      batch.settings.publishTimeoutMs,
      batch.onOutage,
    );
    const at = batch.clock.now();
    const { failures, dead, retried } = failuresOf(batch, settled, at);
    if (settled.published.length > 0 || failures.length > 0) {
      await mark(batch, tx, events, { published: settled.published, rowOf, failures, at });
    }
    result.published = settled.published.length;
    result.dead = dead.length;
    result.retried = failures.length - dead.length;
    result.skipped = events.length - result.published - failures.length;
    if (settled.outage !== undefined) result.outage = settled.outage;
    return { result, published: settled.published, retried, dead };
  });
  report(batch.events, outcome);
  return outcome.result;
}

/** What the mark records for each failed event: a retry after its backoff, or parked as dead. */
function failuresOf(
  batch: BatchContext,
  settled: Settled,
  at: number,
): { failures: MarkFailure[]; dead: DeadEvent[]; retried: RetriedEvent[] } {
  const failures: MarkFailure[] = [];
  const dead: DeadEvent[] = [];
  const retried: RetriedEvent[] = [];
  for (const { event, failure } of settled.failed) {
    const attempts = event.attempts + 1;
    const error = describeError(failure.error);
    const isDead = failure.retryable === false || attempts >= batch.settings.maxAttempts;
    let retryAt = 'infinity';
    if (isDead) {
      dead.push({ event, error });
    } else {
      const delay = Math.max(batch.settings.backoff(attempts), failure.retryAfterMs ?? 0);
      retryAt = new Date(at + delay).toISOString();
      retried.push({ event, error, retryInMs: delay });
      batch.onRetry(at + delay);
    }
    failures.push({ tenant_id: event.tenant ?? '', id: event.id, retry_at: retryAt, error, dead: isDead });
  }
  return { failures, dead, retried };
}

/** Marks the batch's outcome in its transaction, and by key the published events whose row moved. */
async function mark(
  batch: BatchContext,
  tx: Transaction,
  events: readonly OutboxEvent[],
  outcome: {
    published: readonly OutboxEvent[];
    rowOf: Map<OutboxEvent, { row: string; seq: string }>;
    failures: MarkFailure[];
    at: number;
  },
): Promise<void> {
  const { statements } = batch;
  // A batch of one tenant (always, with `tenants`; usually, without) is marked by a statement
  // pinned to it.
  const first = events[0]!.tenant ?? '';
  const only = events.every((e) => (e.tenant ?? '') === first) ? first : null;
  const deleting = batch.settings.retentionMs === 0;
  const now = new Date(outcome.at);
  const marks = {
    published: outcome.published.map((e) => outcome.rowOf.get(e)!),
    now,
    failures: outcome.failures,
  };
  const marked =
    only === null
      ? await (deleting ? statements.markDeleting : statements.mark)(tx, marks)
      : await (deleting ? statements.markDeletingTenant : statements.markTenant)(tx, {
          ...marks,
          tenant: only,
        });
  const moved = { events: eventsNotMarked(outcome.published, marked?.marked), now };
  if (moved.events.length === 0) return;
  if (only === null) await (deleting ? statements.markMovedDeleting : statements.markMoved)(tx, moved);
  else {
    await (deleting ? statements.markMovedDeletingTenant : statements.markMovedTenant)(tx, {
      ...moved,
      tenant: only,
    });
  }
}

/** Events only after COMMIT: until then nothing of the batch is true. */
function report(events: IdemEvents, outcome: Outcome): void {
  if (outcome.published.length > 0) events.emit('outbox:published', { events: outcome.published });
  for (const retried of outcome.retried) events.emit('outbox:retried', retried);
  for (const dead of outcome.dead) events.emit('outbox:dead', dead);
  if (outcome.result.outage !== undefined) events.emit('outbox:outage', { error: outcome.result.outage });
}
