/**
 * Workers that process stored receipts after the answer was sent. Each receipt is claimed with
 * `FOR UPDATE SKIP LOCKED`, then handled in one transaction that also records its entity's version
 * and marks it applied: the handler's writes, the version and the receipt's state commit together
 * or not at all. Failures retry with backoff until a dead letter; dead and unhandled receipts can
 * be redriven.
 *
 * Order-aware handling is chosen per event type: `state` (latest wins), `sequence` (every version,
 * in order; a gap waits, then parks its entity visibly) or `none`. `WebhookHandler.ordering` says
 * what each does. Nothing is ever skipped silently.
 *
 * One entity is handled by one worker at a time, across processes: its row in
 * `webhook_entity_versions` is locked with SKIP LOCKED, and when another worker holds it the
 * receipt goes back to `waiting` (woken when that worker commits) instead of blocking a worker.
 * Different entities proceed in parallel.
 *
 * This class is the facade: the handler model is in handlers.ts, the options in
 * processor-options.ts, the claim loop in claim-loop.ts, the ordering engine in ordering.ts, and
 * the operator tools, which need no handlers, in receipts.ts, entities.ts, discard.ts and sweep.ts.
 */
import type { SweepOptions, SweepResult } from '../core/sweeper.js';
import { drainRounds, PollingWorker } from '../core/worker/polling-worker.js';
import { TableModule } from '../core/store.js';
import { claimReceipts, processReceipt } from './claim-loop.js';
import { discardReceipt, type DiscardOptions, type DiscardResult } from './discard.js';
import {
  listParkedEntities,
  skipEntityGap,
  type ParkedEntity,
  type SkipOptions,
  type SkipResult,
} from './entities.js';
import { registerHandlers } from './handlers.js';
import type { ProcessOutcome } from './outcomes.js';
import type { ProcessorContext } from './processor-context.js';
import { resolveProcessorOptions, type WebhookProcessorOptions } from './processor-options.js';
import { listReceipts, redriveReceipts, type RedriveOptions, type WebhookReceipt } from './receipts.js';
import { renderReceiptStatements, type ReceiptStatements } from './statements.js';
import { sweepReceipts } from './sweep.js';

export {
  normaliseEntity,
  type EntityVersion,
  type WebhookHandler,
  type WebhookHandlers,
  type WebhookOrdering,
} from './handlers.js';
export type { ProcessOutcome, WebhookReceiptRef } from './outcomes.js';
export { processorBackoff, type WebhookProcessorOptions } from './processor-options.js';
export type { RedriveOptions, WebhookReceipt } from './receipts.js';

/** Processes receipts. `start()` runs workers; `runOnce()` and `drain()` drive it by hand (tests, cron). */
export class WebhookProcessor<Client = unknown> extends TableModule<Client, ReceiptStatements> {
  /** What the claim loop and the ordering engine read. */
  private readonly context: ProcessorContext<Client>;
  /** Where the next claim of a processor scoped to tenants starts, so each gets its turn. */
  private nextTenant = 0;
  private readonly worker: PollingWorker;

  constructor(options: WebhookProcessorOptions<Client>) {
    super(options, renderReceiptStatements);
    const resolved = resolveProcessorOptions(options);
    this.worker = new PollingWorker({
      concurrency: resolved.concurrency,
      clock: this.clock,
      pollIntervalMs: () => resolved.pollIntervalMs,
      onError: (error) => this.events.emit('error', { source: 'webhook-processor', where: 'batch', error }),
      // One receipt per round and loop, so `concurrency` loops handle that many at once.
      round: async () => ({ idleMs: (await this.runOnce(1)).length > 0 ? 0 : resolved.pollIntervalMs }),
    });
    this.context = {
      sql: this.sql,
      clock: this.clock,
      events: this.events,
      statements: this.statements,
      options: resolved,
      handlerFor: registerHandlers(options.handlers),
      notify: () => this.notify(),
    };
  }

  /** Starts `concurrency` workers; resolves once they run. Idempotent. */
  async start(): Promise<void> {
    await this.worker.start();
  }

  /** Stops the workers: idle ones at once, busy ones after their current receipt. */
  async stop(): Promise<void> {
    await this.worker.stop();
  }

  /** Wakes idle workers now (call it on the receiver's `webhook:received`). */
  notify(): void {
    this.worker.notify();
  }

  /**
   * Claims up to `limit` due receipts and processes them concurrently. Returns their outcomes.
   * With `tenants`, claims tenant by tenant (each claim pinned to one) until `limit` is reached,
   * starting one tenant further each call.
   */
  async runOnce(limit = this.context.options.concurrency): Promise<ProcessOutcome[]> {
    const claimed = await claimReceipts(this.context, limit, this.nextTenant++);
    return Promise.all(claimed.map((row) => processReceipt(this.context, row)));
  }

  /**
   * Processes until no receipt is due (retries and waits scheduled later stay for later). Bounded
   * by `maxRounds` batches. Returns the outcomes, in order of processing.
   */
  async drain(options: { limit?: number; maxRounds?: number } = {}): Promise<ProcessOutcome[]> {
    return drainRounds(
      () => this.runOnce(options.limit ?? this.context.options.concurrency),
      options.maxRounds,
    );
  }

  /** Puts dead (or unhandled) receipts back to pending with fresh attempts. Returns how many. */
  async redrive(options: RedriveOptions = {}): Promise<number> {
    const count = await redriveReceipts(this.sql, { ...this.operator(), ...options });
    if (count > 0) this.notify();
    return count;
  }

  /** Lists receipts in the given states (default: dead letters), oldest first; of one tenant or all. */
  listReceipts(
    options: { states?: WebhookReceipt['state'][]; source?: string; limit?: number; tenant?: string } = {},
  ): Promise<WebhookReceipt[]> {
    return listReceipts(this.sql, { schema: this.schema, ...options });
  }

  /** Sequence entities parked on a gap, oldest first, with what waits behind each gap. */
  listParked(options: { scope?: string; limit?: number; tenant?: string } = {}): Promise<ParkedEntity[]> {
    return listParkedEntities(this.sql, { schema: this.schema, ...options });
  }

  /**
   * Makes one pending or waiting receipt a dead letter (an operator's decision: it is never
   * handled; `redrive` brings it back), unparking its entity when nothing else waits there. See
   * `idem webhooks discard`.
   */
  discard(options: DiscardOptions): Promise<DiscardResult> {
    return discardReceipt(this.sql, { ...this.operator(), ...options });
  }

  /**
   * Skips the missing versions of a sequence entity (an operator's decision: they will never be
   * applied) and resumes it (`idem webhooks skip`).
   */
  async skip(options: SkipOptions): Promise<SkipResult> {
    const result = await skipEntityGap(this.sql, { ...this.operator(), ...options });
    this.notify();
    return result;
  }

  /**
   * Deletes applied, superseded, duplicate and unhandled receipts past their retention: see
   * `idem sweep`. `tenants` defaults to the processor's.
   */
  sweep(options: SweepOptions = {}): Promise<SweepResult> {
    const { tenants } = this.context.options;
    return sweepReceipts(this.sql, {
      schema: this.schema,
      clock: this.clock,
      ...(tenants ? { tenants } : {}),
      ...options,
    });
  }

  /** What the operator tools take from the processor: its tables, its clock, its events. */
  private operator() {
    return { schema: this.schema, clock: this.clock, events: this.events };
  }
}

/**
 * Creates a processor. See `WebhookProcessorOptions`.
 *
 * @example
 * const processor = createWebhookProcessor({
 *   sql: fromPg(pool),
 *   handlers: { stripe: { 'refund.updated': { ordering: 'state', entity: refundVersion, handle: applyRefund } } },
 * });
 * await processor.start();
 */
export function createWebhookProcessor<Client>(
  options: WebhookProcessorOptions<Client>,
): WebhookProcessor<Client> {
  return new WebhookProcessor(options);
}
