import { systemClock, type Clock } from '../core/clock.js';
import type { Sql } from '../core/sql.js';
import { PollingWorker, type NextRound } from '../core/worker/polling-worker.js';
import type { Backoff } from '../core/resilience/backoff.js';
import { describeError, PublishError } from './errors.js';
import { NotificationListener } from './listener.js';
import { eventsNotMarked, markedRows } from './marked.js';
import { decodeEvent, Outbox } from './outbox.js';
import { renderOutboxStatements, type OutboxStatements } from './statements.js';
import type { OutboxEvent, PublishFailure, Publisher, PublishResult } from './types.js';
import { createEvents, type IdemEvents } from '../core/event-channel.js';
import { resolveDispatcherOptions, type DispatcherOptions } from './dispatcher-options.js';

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

/**
 * Publishes the outbox. Run one or several (in one process or many): they share the work with
 * row locks and SKIP LOCKED, and per-key order holds across all of them.
 *
 * @example
 * const dispatcher = createOutboxDispatcher({
 *   sql: fromPg(pool),
 *   publisher: createRabbitMqPublisher({ url: process.env.AMQP_URL }),
 *   // A direct connection for LISTEN when DATABASE_URL is a transaction-mode pooler.
 *   listen: process.env.DATABASE_DIRECT_URL ?? process.env.DATABASE_URL,
 * });
 * await dispatcher.start();
 * // on shutdown:
 * await dispatcher.stop();
 */
export class OutboxDispatcher {
  private readonly sql: Sql;
  private readonly events: IdemEvents;
  private readonly publisher: Publisher;
  private readonly clock: Clock;
  private readonly statements: OutboxStatements;
  private readonly outbox: Outbox;
  private readonly topics: string[] | null;
  private readonly topicsJson: string | null;
  private readonly tenants: readonly string[] | undefined;
  private readonly batchSize: number;
  private readonly maxAttempts: number;
  private readonly backoff: Backoff;
  private readonly outageBackoff: Backoff;
  private readonly pollIntervalMs: number;
  private readonly fallbackPollIntervalMs: number;
  private readonly publishTimeoutMs: number;
  private readonly retentionMs: number;
  private readonly sweepIntervalMs: number;
  private readonly concurrency: number;
  private readonly listener: NotificationListener | undefined;
  private readonly worker: PollingWorker;
  /** Outages in a row, per loop: each loop backs off on its own. */
  private readonly outages: number[];
  /** Earliest retry this process scheduled; the loops wake for it without waiting for a poll. */
  private nextRetryAt = Infinity;
  private lastSweepAt = -Infinity;
  private started = false;

  constructor(options: DispatcherOptions) {
    this.sql = options.sql;
    this.publisher = options.publisher;
    this.clock = options.clock ?? systemClock;
    this.events = options.events ?? createEvents();
    const resolved = resolveDispatcherOptions(options);
    ({
      topics: this.topics,
      topicsJson: this.topicsJson,
      tenants: this.tenants,
      batchSize: this.batchSize,
      maxAttempts: this.maxAttempts,
      backoff: this.backoff,
      outageBackoff: this.outageBackoff,
      pollIntervalMs: this.pollIntervalMs,
      fallbackPollIntervalMs: this.fallbackPollIntervalMs,
      publishTimeoutMs: this.publishTimeoutMs,
      retentionMs: this.retentionMs,
      sweepIntervalMs: this.sweepIntervalMs,
      concurrency: this.concurrency,
    } = resolved);
    this.outbox = new Outbox({
      sql: options.sql,
      schema: resolved.schema,
      clock: this.clock,
      events: this.events,
    });
    this.statements = renderOutboxStatements(resolved.schema);
    this.outages = Array.from({ length: this.concurrency }, () => 0);
    this.worker = new PollingWorker({
      concurrency: this.concurrency,
      clock: this.clock,
      pollIntervalMs: () => this.currentPollIntervalMs,
      round: (index) => this.round(index),
      onError: (error) => this.reportError(error, 'batch'),
      // A pause after an error ends early only to stop, not for new events.
      afterError: (failures) => ({ idleMs: this.outageBackoff(failures), wakeable: false }),
    });
    if (options.listen) {
      this.listener = new NotificationListener({
        source: options.listen,
        channel: this.statements.channel,
        onNotification: (topic) => {
          if (!this.topics || this.topics.includes(topic)) this.notify();
        },
        // Notifications sent while we were not listening are lost: look now.
        onConnected: () => this.notify(),
        events: this.events,
        errorSource: 'dispatcher',
        reconnectDelayMs: (failures) => this.outageBackoff(failures),
        ...(resolved.selfTest && {
          // Through `sql`, the way producers notify: a pooler between them and the listener is
          // exactly what the test must catch.
          sendSelfTest: (payload: string) =>
            this.sql.query('SELECT pg_notify($1, $2)', [this.statements.channel, payload]),
          selfTestIntervalMs: resolved.selfTest.intervalMs,
          selfTestTimeoutMs: resolved.selfTest.timeoutMs,
        }),
        // Reported by the listener; events may be waiting since the test was sent.
        onDeaf: () => this.notify(),
      });
    }
  }

  /** Starts listening (when configured) and the batch loops. Resolves once running. */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    await this.listener?.start();
    await this.worker.start();
  }

  /** Stops the loops (idle ones at once, busy ones after their current batch), and the listener. */
  async stop(): Promise<void> {
    if (!this.started) return;
    this.started = false;
    await this.worker.stop();
    await this.listener?.stop();
  }

  /**
   * What wakes the dispatcher: `'poll'` without `listen`; `'listening'` when notifications arrive
   * (the last self-test passed, or none has run yet); `'deaf'` when a self-test notification did
   * not arrive; `'connecting'` while the LISTEN connection is (re)connecting. In the last two the
   * dispatcher polls every `fallbackPollIntervalMs`.
   */
  get wakeups(): 'poll' | 'listening' | 'deaf' | 'connecting' {
    if (!this.listener) return 'poll';
    if (this.listener.deaf) return 'deaf';
    return this.listener.listening ? 'listening' : 'connecting';
  }

  /** The poll interval now: shorter while notifications cannot be relied on. */
  private get currentPollIntervalMs(): number {
    const wakeups = this.wakeups;
    return wakeups === 'deaf' || wakeups === 'connecting' ? this.fallbackPollIntervalMs : this.pollIntervalMs;
  }

  /** Asks the loops to look for work now (what a notification does). */
  notify(): void {
    this.worker.notify();
  }

  /**
   * Runs batches until nothing is due (or `maxBatches`), without the loops. For tests, scripts and
   * a dispatcher driven by an injected clock. Stops at the first outage and reports it.
   */
  async drain(options: { maxBatches?: number } = {}): Promise<BatchResult> {
    const total: BatchResult = { claimed: 0, published: 0, retried: 0, dead: 0, skipped: 0, held: 0 };
    const maxBatches = options.maxBatches ?? 10_000;
    for (let i = 0; i < maxBatches; i++) {
      const result = await this.runOnce();
      for (const field of ['claimed', 'published', 'retried', 'dead', 'skipped', 'held'] as const) {
        total[field] += result[field];
      }
      if (result.outage !== undefined) return { ...total, outage: result.outage };
      if (result.claimed === 0 && result.held === 0) break;
    }
    return total;
  }

  /**
   * One batch: claim the heads of due keys and their runs, publish them wave by wave (one event
   * per key per wave), and mark the outcome, all in one transaction. With `tenants`, one batch per
   * tenant (each its own transaction), added up.
   *
   * This transaction (one pooled connection, the row locks on the batch's key heads) stays open
   * while the publisher talks to the broker: on purpose. The locks are what keep one key's events
   * in order and other dispatchers off the same keys, at no extra write per event; a lease column
   * would cost a committed write to claim and another to release every event. What it costs: the
   * batch's connection is busy for the broker's confirms, ~44 ms per 500 events for RabbitMQ with
   * publisher confirms and ~27 ms for NATS JetStream (the publishers alone: 11,313 and 18,526
   * events/s, bench/report.md), and a broker that stalls holds it up to `publishTimeoutMs`, after
   * which the batch is abandoned; `idle_in_transaction_session_timeout` (set by the claim) ends a
   * dispatcher frozen mid-batch. Give the dispatcher its own small pool where the producers' pool
   * is tight. (The in-database publisher delivers each event in its own transaction on further
   * connections of its inbox's pool, up to its `concurrency`, while this one waits.)
   */
  async runOnce(): Promise<BatchResult> {
    if (!this.tenants) return this.runBatch(null);
    const total: BatchResult = { claimed: 0, published: 0, retried: 0, dead: 0, skipped: 0, held: 0 };
    for (const tenant of this.tenants) {
      const result = await this.runBatch(tenant);
      for (const field of ['claimed', 'published', 'retried', 'dead', 'skipped', 'held'] as const) {
        total[field] += result[field];
      }
      if (result.outage !== undefined) return { ...total, outage: result.outage };
    }
    return total;
  }

  /** One batch of one tenant (`tenant`), or across every tenant (null). */
  private async runBatch(tenant: string | null): Promise<BatchResult> {
    const result = await this.sql.transaction(async (tx) => {
      const now = this.clock.now();
      // The claim also sets two transaction-local settings (one round trip fewer per batch):
      // idle_in_transaction_session_timeout, so a dispatcher stuck while holding head locks
      // (frozen process, half-open network) cannot park its keys forever; and synchronous_commit
      // off: this transaction only writes marks, and if the server loses the last commits in a
      // crash those events are published again and consumers dedupe them, the same as a
      // dispatcher crash before marking. Measured: commit 7–24 ms → under 1 ms per 500 events.
      const claim = tenant === null ? 'claim' : 'claimTenant';
      const { rows } = await tx.query(
        this.statements[claim],
        [
          new Date(now),
          this.batchSize,
          this.topicsJson,
          // The transaction idles while the broker confirms, at most publishTimeoutMs; 5 s more is
          // the mark's own time. (It was 30 s more: behind a partition that never healed, a
          // batch's head locks stayed a minute; now publishTimeoutMs + 5 s, 35 s by default.)
          String(Math.ceil(this.publishTimeoutMs + idleMarginMs)),
          ...(tenant === null ? [] : [tenant]),
        ],
        this.statements.names[claim],
      );
      const held = Number(rows[0]?.held ?? 0);
      const claimed = rows.filter((row) => row.id !== null && row.id !== undefined);
      const events = claimed.map(decodeEvent);
      // Where the claim read each event, and its seq: the mark finds published events by the first
      // and checks what it found by the second (see markStatement). By event, not by id: two
      // tenants' events may share an id.
      const rowOf = new Map(
        events.map((event, i) => [event, { row: claimed[i]!.row as string, seq: String(claimed[i]!.seq) }]),
      );
      const result: BatchResult = {
        claimed: events.length,
        published: 0,
        retried: 0,
        dead: 0,
        skipped: 0,
        held,
      };
      if (events.length === 0) return { result, published: [] as OutboxEvent[], retried: [], dead: [] };

      const settled = await this.publishInWaves(events);
      const at = this.clock.now();
      const failures: { tenant_id: string; id: string; retry_at: string; error: string; dead: boolean }[] =
        [];
      const dead: DeadEvent[] = [];
      const retried: RetriedEvent[] = [];
      for (const { event, failure } of settled.failed) {
        const attempts = event.attempts + 1;
        const error = describeError(failure.error);
        const isDead = failure.retryable === false || attempts >= this.maxAttempts;
        let retryAt = 'infinity';
        if (isDead) {
          dead.push({ event, error });
        } else {
          const delay = Math.max(this.backoff(attempts), failure.retryAfterMs ?? 0);
          retryAt = new Date(at + delay).toISOString();
          retried.push({ event, error, retryInMs: delay });
          this.nextRetryAt = Math.min(this.nextRetryAt, at + delay);
        }
        failures.push({
          tenant_id: event.tenant ?? '',
          id: event.id,
          retry_at: retryAt,
          error,
          dead: isDead,
        });
      }
      if (settled.published.length > 0 || failures.length > 0) {
        // A batch of one tenant (always, with `tenants`; usually, without) is marked by a statement
        // pinned to it.
        const first = events[0]!.tenant ?? '';
        const only = events.every((e) => (e.tenant ?? '') === first) ? first : null;
        const deleting = this.retentionMs === 0;
        const mark =
          only === null
            ? deleting
              ? 'markDeleting'
              : 'mark'
            : deleting
              ? 'markDeletingTenant'
              : 'markTenant';
        const { rows: marks } = await tx.query(
          this.statements[mark],
          [
            markedRows(settled.published.map((e) => rowOf.get(e)!)),
            new Date(at),
            JSON.stringify(failures),
            ...(only === null ? [] : [only]),
          ],
          this.statements.names[mark],
        );
        const moved = eventsNotMarked(settled.published, marks[0]?.marked);
        if (moved.length > 0) {
          const markMoved = `markMoved${deleting ? 'Deleting' : ''}${only === null ? '' : 'Tenant'}` as const;
          await tx.query(this.statements[markMoved], [
            JSON.stringify(moved.map((e) => ({ tenant_id: e.tenant ?? '', id: e.id }))),
            ...(deleting ? [] : [new Date(at)]),
            ...(only === null ? [] : [only]),
          ]);
        }
      }
      result.published = settled.published.length;
      result.dead = dead.length;
      result.retried = failures.length - dead.length;
      result.skipped = events.length - result.published - failures.length;
      if (settled.outage !== undefined) result.outage = settled.outage;
      return { result, published: settled.published, retried, dead };
    });
    // Events only after COMMIT: until then nothing above is true.
    const r = result.result;
    if (result.published.length > 0) this.events.emit('outbox:published', { events: result.published });
    for (const retried of result.retried) this.events.emit('outbox:retried', retried);
    for (const dead of result.dead) this.events.emit('outbox:dead', dead);
    if (r.outage !== undefined) this.events.emit('outbox:outage', { error: r.outage });
    return r;
  }

  /**
   * Publishes a batch so that no event goes out before an earlier event of its key has been
   * confirmed: each wave holds the next event of every key whose earlier events all succeeded. With
   * many keys that is one call per batch; a single hot key costs one call per event.
   */
  private async publishInWaves(events: OutboxEvent[]): Promise<Settled> {
    const byKey = new Map<string, OutboxEvent[]>();
    for (const event of events) {
      const id = `${event.tenant ?? ''}\u0000${event.topic}\u0000${event.key}`;
      const list = byKey.get(id);
      if (list) list.push(event);
      else byKey.set(id, [event]);
    }
    const settled: Settled = { published: [], failed: [] };
    // Each run's next event; a run leaves once its event failed or it has none left.
    let runs = [...byKey.values()].map((events) => ({ events, next: 0 }));
    while (runs.length > 0) {
      // A publisher reports results by event id, and two tenants' events may share one (an id the
      // producer chose): a wave holds each id once, and a run whose next id is taken waits a wave.
      const ids = new Set<string>();
      const inWave = runs.filter((run) => {
        const id = run.events[run.next]!.id;
        if (ids.has(id)) return false;
        ids.add(id);
        return true;
      });
      const wave = inWave.map((run) => run.events[run.next]!);
      let results: readonly PublishResult[];
      try {
        results = await this.publishWithTimeout(wave);
      } catch (error) {
        this.reportError(error, 'publish');
        settled.outage = error;
        break;
      }
      const byId = new Map(results.map((r) => [r.id, r]));
      const stopped = new Set<(typeof runs)[number]>();
      for (const run of inWave) {
        const event = run.events[run.next]!;
        const r = byId.get(event.id);
        if (r?.ok) {
          settled.published.push(event);
          if (++run.next === run.events.length) stopped.add(run);
        } else {
          stopped.add(run);
          settled.failed.push({
            event,
            failure: r ?? {
              id: event.id,
              ok: false,
              error: new PublishError(
                `publisher ${this.publisher.name ?? ''} returned no result for the event`,
              ),
            },
          });
        }
      }
      runs = runs.filter((run) => !stopped.has(run));
    }
    return settled;
  }

  private async publishWithTimeout(wave: OutboxEvent[]): Promise<readonly PublishResult[]> {
    const controller = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const error = new PublishError(`publish timed out after ${this.publishTimeoutMs} ms`);
        controller.abort(error);
        reject(error);
      }, this.publishTimeoutMs);
    });
    try {
      return await Promise.race([this.publisher.publish(wave, controller.signal), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** One round of loop `index` for the polling worker: a batch, then when to look again. */
  private async round(index: number): Promise<NextRound> {
    const result = await this.runOnce();
    if (result.outage !== undefined) {
      // A pause after an outage ends early only to stop, not for new events.
      return { idleMs: this.outageBackoff(++this.outages[index]!), wakeable: false };
    }
    this.outages[index] = 0;
    if (index === 0) await this.maybeSweep();
    // More may be waiting: a full batch, or rows pushed aside. (Events added meanwhile notify.)
    if (result.claimed > 0 || result.held > 0) return { idleMs: 0 };
    const untilRetry = this.nextRetryAt - this.clock.now();
    if (untilRetry <= 0) this.nextRetryAt = Infinity;
    return { idleMs: Math.max(0, Math.min(this.currentPollIntervalMs, untilRetry)) };
  }

  private async maybeSweep(): Promise<void> {
    if (this.sweepIntervalMs === 0 || this.retentionMs === 0) return;
    const now = this.clock.now();
    if (now - this.lastSweepAt < this.sweepIntervalMs) return;
    this.lastSweepAt = now;
    try {
      await this.outbox.sweep({
        olderThanMs: this.retentionMs,
        // A few batches per round: the loop goes back to publishing; the next round sweeps on.
        maxBatches: 10,
        ...(this.tenants ? { tenants: this.tenants } : {}),
      });
    } catch (error) {
      this.reportError(error, 'sweep');
    }
  }

  private reportError(error: unknown, where: 'batch' | 'publish' | 'sweep'): void {
    this.events.emit('error', { source: 'dispatcher', where, error });
  }
}

/**
 * Creates a dispatcher (see `OutboxDispatcher` for the lifecycle and `DispatcherOptions` for the
 * defaults).
 *
 * @example
 * const dispatcher = createOutboxDispatcher({ sql: fromPg(pool), publisher: createRabbitMqPublisher({ url }) });
 * await dispatcher.start();
 */
export function createOutboxDispatcher(options: DispatcherOptions): OutboxDispatcher {
  return new OutboxDispatcher(options);
}

interface Settled {
  published: OutboxEvent[];
  failed: { event: OutboxEvent; failure: PublishFailure }[];
  outage?: unknown;
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

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /** A batch's events were published and marked, after its transaction committed. */
    'outbox:published': { events: readonly OutboxEvent[] };
    /**
     * An event's publish failed and it is scheduled again in `retryInMs` (its backoff, or the
     * destination's Retry-After when longer), after the batch committed. `error` is
     * `describeError` of the failure; `event.attempts` counts the attempts before this one.
     */
    'outbox:retried': { event: OutboxEvent; error: string; retryInMs: number };
    /**
     * An event was parked as dead (its `maxAttempts` spent, or a failure that says
     * `retryable: false`), after the batch committed: its key waits for a redrive.
     */
    'outbox:dead': { event: OutboxEvent; error: string };
    /**
     * The publisher could not reach its destination (`publish` threw or timed out): the batch
     * counted no attempt, and the dispatcher pauses (`outageBackoff`). The error itself is also
     * an `error` event (source `dispatcher`, where `publish`).
     */
    'outbox:outage': { error: unknown };
  }
}
