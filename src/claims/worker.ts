import type { IdemEvents } from '../core/event-channel.js';
import type { Transaction } from '../core/sql.js';
import { validateTenants } from '../core/tenant.js';
import { positive, positiveInteger } from '../core/validate.js';
import { drainRounds, PollingWorker, type NextRound } from '../core/worker/polling-worker.js';
import type { Claims, RunOutcome } from './claims.js';
import { LocalQueue } from './local-queue.js';
import type { ClaimedTask } from './task.js';

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /**
     * A claims worker ran a task and it settled: `completed` (the handler's writes and the
     * completion committed), `ready` (failed, retried after backoff), `dead` (failed for good:
     * a dead letter) or `fenced` (its lease was taken over; nothing of this run committed).
     * `error`: what the handler threw, or the `FencedError`. The task's payload is not included.
     */
    'task:settled': {
      task: { id: string; tenant: string; queue: string; key: string; attempts: number };
      state: 'completed' | 'ready' | 'dead' | 'fenced';
      error?: unknown;
    };
  }
}

/** Options of `createClaimsWorker`. */
export interface ClaimsWorkerOptions<P, R, Client = unknown> {
  /** The tasks' store (`createClaims`). */
  claims: Claims<Client>;
  /** The queue this worker claims from. */
  queue: string;
  /**
   * Runs one task inside the transaction that completes it (fence first, then the handler's
   * writes, then the completion): its writes and the completion commit together.
   */
  handler: (tx: Transaction<Client>, task: ClaimedTask<P>) => Promise<R>;
  /**
   * Batches (when `concurrency` is not set): tasks claimed per round trip; they run concurrently,
   * each on its own connection, and the next batch is claimed when all of them have settled.
   * Default 10.
   */
  batchSize?: number;
  /**
   * Slots: up to this many tasks run at once, and a slot that frees up gets its next task at once,
   * without waiting for the slowest task of a batch. A task's completion claims its slot's next
   * task in the same statement (sent with COMMIT on a pipelined connection, behind the task's lock:
   * a task whose handler writes nothing costs one round trip and one commit); slots that found the
   * queue empty share one claim when they poll (a local queue). A task is only claimed for a slot that is free, so no lease is spent waiting in
   * a buffer, and `stop()` puts back a task claimed for a slot that did not get to run it. Each
   * running task holds one connection. Default: not set (batches of `batchSize`).
   */
  concurrency?: number;
  /** Wait after an empty or partial batch, in ms. Default 1000. A full batch polls again at once. */
  pollIntervalMs?: number;
  /**
   * Where the worker reports: a `task:settled` event per task run, and an `error` (source
   * `claims-worker`, where `batch`) for a database error of the loop itself, after which the loop
   * waits `pollIntervalMs` and goes on. Default: the channel of `claims` (its `events` option).
   */
  events?: IdemEvents;
  /**
   * Only these tenants' tasks: each claim is one tenant's, pinned to it, taken in turn until the
   * batch is full (a worker per shard of a database distributed by tenant, or per group of
   * tenants). Default: every tenant's tasks of the queue, in one claim.
   */
  tenants?: readonly string[];
}

/**
 * A polling worker: claims batches from `queue` and runs each task with `claims.run` (fence,
 * the handler's writes and the completion in one transaction).
 *
 * @example
 * const worker = createClaimsWorker({ claims, queue: 'emails', handler: async (tx, task) => send(tx, task.payload) });
 * await worker.start();
 * // on shutdown:
 * await worker.stop();
 */
export class ClaimsWorker<P, R, Client> extends PollingWorker {
  private readonly batchSize: number;
  private readonly pollIntervalMs: number;
  private readonly tenants: readonly string[] | undefined;
  /** With `concurrency`: the local queue the slots take their tasks from. */
  private readonly slots: LocalQueue<ClaimedTask<P>> | undefined;
  /** Per slot, the task its last completion claimed, run in its next round. */
  private carried: (ClaimedTask<P> | undefined)[] = [];
  /** Where the next claim of a worker scoped to tenants starts, so each gets its turn first. */
  private nextTenant = 0;

  private readonly claims: Claims<Client>;
  private readonly events: IdemEvents;
  private readonly queue: string;
  private readonly handler: (tx: Transaction<Client>, task: ClaimedTask<P>) => Promise<R>;

  constructor(options: ClaimsWorkerOptions<P, R, Client>) {
    // One loop; `start`, `stop` (at once when idle, after the batch in flight otherwise) and
    // `notify` (tasks were enqueued) are the polling worker's own.
    super({
      clock: options.claims.clock,
      pollIntervalMs: () => this.pollIntervalMs,
      onError: (error) => this.events.emit('error', { source: 'claims-worker', where: 'batch', error }),
      // With `concurrency`, one loop per slot; otherwise one loop of batches.
      concurrency: options.concurrency ?? 1,
      round: (slot) => (this.slots ? this.slotRound(this.slots, slot) : this.batchRound()),
    });
    ({ claims: this.claims, queue: this.queue, handler: this.handler } = options);
    this.events = options.events ?? options.claims.events;
    this.batchSize = positiveInteger('batchSize', options.batchSize ?? 10);
    this.pollIntervalMs = positive('pollIntervalMs', options.pollIntervalMs ?? 1000);
    this.tenants = validateTenants(options.tenants);
    this.slots =
      options.concurrency === undefined ? undefined : new LocalQueue((limit) => this.claimBatch(limit));
  }

  /**
   * Claims one batch of `batchSize` and runs its tasks concurrently; returns their outcomes. (With
   * `concurrency` too: `runOnce` and `drain` are the batch path, for tests, scripts and cron.)
   */
  async runOnce(): Promise<RunOutcome<R>[]> {
    const tasks = await this.claimBatch(this.batchSize);
    return Promise.all(tasks.map((task) => this.runTask(task)));
  }

  private async batchRound(): Promise<NextRound> {
    const claimed = (await this.runOnce()).length;
    return { idleMs: claimed < this.batchSize ? this.pollIntervalMs : 0 };
  }

  /**
   * One slot: the task its last completion claimed, else one from the local queue, run; or, when
   * none was due, the poll interval. Without `tenants`, the completion claims the slot's next
   * task in the same statement (`runAndClaimNext`); with them, every claim goes through the local
   * queue, which takes the tenants in turn.
   */
  private async slotRound(slots: LocalQueue<ClaimedTask<P>>, slot: number): Promise<NextRound> {
    const task = this.carried[slot] ?? (await slots.take());
    this.carried[slot] = undefined;
    if (task === undefined) return { idleMs: this.pollIntervalMs };
    if (this.tenants) {
      await this.runTask(task);
      return { idleMs: 0 };
    }
    const { outcome, next } = await this.claims.runAndClaimNext(task, this.handler, this.queue);
    this.settled(task, outcome);
    this.carried[slot] = next;
    return { idleMs: 0 };
  }

  /**
   * Stops the loops (see `PollingWorker.stop`), then puts back the tasks the slots' last
   * completions claimed but did not get to run, so they are due at once, not after their lease.
   */
  override async stop(): Promise<void> {
    await super.stop();
    const carried = this.carried.filter((task): task is ClaimedTask<P> => task !== undefined);
    this.carried = [];
    // A task that cannot be put back is due again when its lease ends: reported, not thrown.
    const released = await Promise.allSettled(carried.map((task) => this.claims.release(task)));
    for (const r of released) {
      if (r.status === 'rejected')
        this.events.emit('error', { source: 'claims-worker', where: 'batch', error: r.reason });
    }
  }

  private async runTask(task: ClaimedTask<P>): Promise<RunOutcome<R>> {
    const outcome = await this.claims.run(task, this.handler);
    this.settled(task, outcome);
    return outcome;
  }

  private settled(task: ClaimedTask<P>, outcome: RunOutcome<R>): void {
    if (this.events.has('task:settled')) {
      const { id, tenant, queue, key, attempts } = task;
      this.events.emit('task:settled', {
        task: { id, tenant, queue, key, attempts },
        state: outcome.state,
        ...('error' in outcome ? { error: outcome.error } : {}),
      });
    }
  }

  /** Runs batches until none is claimed (bounded by `maxRounds`); returns every outcome. */
  drain(options: { maxRounds?: number } = {}): Promise<RunOutcome<R>[]> {
    return drainRounds(() => this.runOnce(), options.maxRounds);
  }

  private async claimBatch(batchSize: number): Promise<ClaimedTask<P>[]> {
    const { claims, queue, tenants } = this;
    if (!tenants) return claims.claim<P>(queue, { limit: batchSize });
    // One tenant after another, starting one further each round so each gets its turn first.
    const tasks: ClaimedTask<P>[] = [];
    const start = this.nextTenant++ % tenants.length;
    for (let i = 0; i < tenants.length && tasks.length < batchSize; i++) {
      const tenant = tenants[(start + i) % tenants.length]!;
      tasks.push(...(await claims.claim<P>(queue, { limit: batchSize - tasks.length, tenant })));
    }
    return tasks;
  }
}

/**
 * Creates a claims worker for `options.queue`. Creating it starts nothing: `start()` runs its
 * loop, `stop()` ends it after the batch in flight. See `ClaimsWorkerOptions`.
 *
 * @example
 * const worker = createClaimsWorker({ claims, queue: 'emails', handler: async (tx, task) => send(tx, task.payload) });
 * await worker.start();
 */
export function createClaimsWorker<P, R, Client>(
  options: ClaimsWorkerOptions<P, R, Client>,
): ClaimsWorker<P, R, Client> {
  return new ClaimsWorker(options);
}
