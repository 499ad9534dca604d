import { systemClock, type Clock } from '../core/clock.js';
import type { Sql } from '../core/sql.js';
import { PollingWorker, type NextRound } from '../core/worker/polling-worker.js';
import type { Backoff } from '../core/resilience/backoff.js';
import { addBatch, emptyBatch, runBatch, type BatchContext, type BatchResult } from './batch.js';
import { NotificationListener } from './listener.js';
import { Outbox } from './outbox.js';
import { renderOutboxStatements, type OutboxStatements } from './statements.js';
import type { OutboxEvent } from './types.js';
import { createEvents, type IdemEvents } from '../core/event-channel.js';
import {
  resolveDispatcherOptions,
  type DispatcherOptions,
  type ResolvedDispatcherOptions,
} from './dispatcher-options.js';

export type { BatchResult } from './batch.js';

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
  private readonly clock: Clock;
  private readonly statements: OutboxStatements;
  private readonly outbox: Outbox;
  private readonly topics: string[] | null;
  private readonly tenants: readonly string[] | undefined;
  private readonly outageBackoff: Backoff;
  private readonly pollIntervalMs: number;
  private readonly fallbackPollIntervalMs: number;
  private readonly retentionMs: number;
  private readonly sweepIntervalMs: number;
  /** What each batch reads (batch.ts). */
  private readonly batch: BatchContext;
  private readonly listener: NotificationListener | undefined;
  private readonly worker: PollingWorker;
  /** Outages in a row, per loop: each loop backs off on its own. */
  private readonly outages: number[];
  /** Earliest retry this process scheduled; the loops wake for it without waiting for a poll. */
  private nextRetryAt = Infinity;
  private lastSweepAt = -Infinity;
  private started = false;

  constructor(options: DispatcherOptions) {
    const resolved = resolveDispatcherOptions(options);
    this.sql = options.sql;
    this.clock = options.clock ?? systemClock;
    this.events = options.events ?? createEvents();
    ({
      topics: this.topics,
      tenants: this.tenants,
      outageBackoff: this.outageBackoff,
      pollIntervalMs: this.pollIntervalMs,
      fallbackPollIntervalMs: this.fallbackPollIntervalMs,
      retentionMs: this.retentionMs,
      sweepIntervalMs: this.sweepIntervalMs,
    } = resolved);
    const { sql, clock, events } = this;
    this.outbox = new Outbox({ sql, schema: resolved.schema, clock, events });
    this.statements = renderOutboxStatements(resolved.schema);
    this.batch = {
      settings: resolved,
      sql,
      clock,
      events,
      statements: this.statements,
      publisher: options.publisher,
      onOutage: (error) => this.reportError(error, 'publish'),
      onRetry: (at) => (this.nextRetryAt = Math.min(this.nextRetryAt, at)),
    };
    this.outages = Array.from({ length: resolved.concurrency }, () => 0);
    this.worker = new PollingWorker({
      concurrency: resolved.concurrency,
      clock,
      pollIntervalMs: () => this.currentPollIntervalMs,
      round: (index) => this.round(index),
      onError: (error) => this.reportError(error, 'batch'),
      // A pause after an error ends early only to stop, not for new events.
      afterError: (failures) => ({ idleMs: this.outageBackoff(failures), wakeable: false }),
    });
    this.listener = options.listen ? this.createListener(options.listen, resolved) : undefined;
  }

  /** The LISTEN connection: a notification of one of our topics, or a reconnection, wakes the loops. */
  private createListener(
    source: NonNullable<DispatcherOptions['listen']>,
    resolved: ResolvedDispatcherOptions,
  ): NotificationListener {
    return new NotificationListener({
      source,
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
        sendSelfTest: (payload: string) => this.statements.selfTest(this.sql, { payload }),
        selfTestIntervalMs: resolved.selfTest.intervalMs,
        selfTestTimeoutMs: resolved.selfTest.timeoutMs,
      }),
      // Reported by the listener; events may be waiting since the test was sent.
      onDeaf: () => this.notify(),
    });
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
    const total = emptyBatch();
    const maxBatches = options.maxBatches ?? 10_000;
    for (let i = 0; i < maxBatches; i++) {
      const result = await this.runOnce();
      addBatch(total, result);
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
    if (!this.tenants) return runBatch(this.batch, null);
    const total = emptyBatch();
    for (const tenant of this.tenants) {
      const result = await runBatch(this.batch, tenant);
      addBatch(total, result);
      if (result.outage !== undefined) return { ...total, outage: result.outage };
    }
    return total;
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
