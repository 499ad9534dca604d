import { FencedError, InvalidArgumentError, isFenced, type OperationScope } from '../core/errors.js';
import { deriveKey } from '../core/keys.js';
import type { Queryable, Sql, Transaction } from '../core/sql.js';
import type { Clock } from '../core/clock.js';
import type { IdemEvents } from '../core/event-channel.js';
import type { BackoffOptions } from '../core/resilience/backoff.js';
import { DecorrelatedJitter } from '../core/resilience/in-process-backoff.js';
import { isRetryableStepFailure } from '../steps/retryable.js';
import { retryDelay } from '../core/resilience/retry-after.js';
import {
  describeFailure,
  inHeldTransaction,
  runCallStep,
  runLocalStep,
  type StepResult,
  type StepRunner,
} from '../steps/engine.js';
import type { FencedLease } from '../steps/lease.js';
import { decodeResult, encodeResult } from '../steps/result-codec.js';
import type { AnyStep, SagaDefinition, SagaPoint, SagaRef, SagaStep } from './definition.js';
import { SagaFailedError, SagaStuckError } from './errors.js';
import type { SagaStepRecord } from './saga-record.js';
import type { Holder, SagaStatements } from './statements.js';

/** A hook's throw, carried out of the engine untouched: the process is treated as dead. */
export class Halt {
  constructor(readonly error: unknown) {}
}

/** What a saga returns when it completes. */
export interface SagaResult<O> {
  value: O;
  /** True when the saga had already completed and its stored result was returned. */
  replayed: boolean;
  /** True when this process took the saga over from a holder that crashed or stalled. */
  resumed: boolean;
}

/**
 * What an execution needs from the engine that drives it: its settings, its statements and the
 * shared step runner. A plain object built once by `Sagas`, so this module does not import it.
 */
export interface SagaEngine<Client> {
  readonly sql: Sql<Client>;
  readonly statements: SagaStatements;
  readonly runner: StepRunner<Client>;
  readonly clock: Clock;
  readonly leaseMs: number;
  readonly actionAttempts: number;
  readonly compensationAttempts: number;
  readonly backoff: BackoffOptions | undefined;
  readonly maxRetryAfterMs: number;
  readonly hooks: { at(point: SagaPoint, saga: SagaRef): void | Promise<void> } | undefined;
  readonly events: IdemEvents;
}

/** Where an execution starts: a fresh saga, or one this process just claimed or took over. */
export interface SagaStart<I, O, Client> {
  definition: SagaDefinition<I, O, Client>;
  ref: SagaRef;
  /** The input as stored (parsed from JSON). */
  input: I;
  /** The fence this holder claimed. */
  fence: number;
  status: 'running' | 'compensating';
  cursor: number;
  /** The steps recorded so far (none for a fresh saga). */
  steps: SagaStepRecord[];
  /** Why the saga went backward, as stored; null when it has not. */
  failure: string | null;
  /** True when this process took the saga over from an earlier holder. */
  resumed: boolean;
}

/** The keys of a step: stable for the intent, distinct per step and per direction. */
export function stepKeys(
  ref: SagaRef,
  position: number,
  name: string,
): { action: string; compensation: string } {
  const scope = sagaScope(ref);
  return {
    action: deriveKey(scope, 'step', String(position), name, 'action'),
    compensation: deriveKey(scope, 'step', String(position), name, 'compensation'),
  };
}

export function sagaScope(ref: SagaRef): OperationScope {
  return { tenant: ref.tenant, operation: `saga:${ref.saga}`, key: ref.key };
}

/** An action or a compensation, of either kind, as the engine calls it. */
type StepBody =
  | { local: (context: object) => Promise<unknown> }
  | { call: (context: object) => Promise<unknown>; record?: (context: object) => Promise<unknown> };

function actionOf(step: AnyStep): StepBody {
  if (step.call) {
    const { record } = step;
    return {
      call: (context) => step.call!(context as never),
      ...(record ? { record: (context: object) => record.call(step, context as never) } : {}),
    };
  }
  return { local: (context) => step.action!(context as never) };
}

/** How a step is undone, or null when it has nothing to undo. */
function compensationOf(step: AnyStep): StepBody | null {
  if (step.compensateCall) {
    const { recordCompensation } = step;
    return {
      call: (context) => step.compensateCall!(context as never),
      ...(recordCompensation
        ? { record: (context: object) => recordCompensation.call(step, context as never) }
        : {}),
    };
  }
  if (step.compensate) return { local: (context) => step.compensate!(context as never) };
  return null;
}

/** Whether the step has a compensation (its key is persisted with the step). */
export function hasCompensation(step: AnyStep): boolean {
  return compensationOf(step) !== null;
}

/**
 * One holder's run of one saga instance, from a claim or takeover to a final state. Every write
 * checks the fence. Actions and compensations run through the shared step engine
 * (`src/steps/engine.ts`, the same code as `idem.steps`): a local one in a short transaction that
 * first takes the fence (row-locking the saga), then runs it, then records it and moves the
 * cursor; one that calls out between two such short transactions, with a heartbeat on the lease.
 */
export class SagaExecution<I, O, Client> {
  private readonly definition: SagaDefinition<I, O, Client>;
  private readonly ref: SagaRef;
  private readonly input: I;
  private readonly fence: number;
  private status: 'running' | 'compensating';
  private cursor: number;
  private readonly resumed: boolean;
  private readonly results: Record<string, unknown> = {};
  private readonly steps = new Map<number, SagaStepRecord>();
  private failure: { text: string; error: unknown } | null = null;
  private readonly lease: FencedLease = {
    hold: (tx) => this.takeFence(tx),
    renew: async () => (await this.engine.statements.fence(this.engine.sql, this.fenceInput())) === 1,
    lost: () => new FencedError(sagaScope(this.ref), this.fence),
  };

  constructor(
    private readonly engine: SagaEngine<Client>,
    start: SagaStart<I, O, Client>,
  ) {
    const { definition, ref } = start;
    this.definition = definition;
    this.ref = ref;
    this.input = start.input;
    this.fence = start.fence;
    this.status = start.status;
    this.cursor = start.cursor;
    this.resumed = start.resumed;
    for (const s of start.steps) {
      const declared = definition.steps[s.position];
      if (!declared || declared.name !== s.name) {
        throw new InvalidArgumentError(
          `saga ${ref.saga} ${ref.key}: recorded step ${s.position} is "${s.name}" but the definition has ` +
            `"${declared?.name ?? 'nothing'}" there; keep steps append-only while instances are in flight`,
        );
      }
      this.steps.set(s.position, s);
      if (s.doneAt !== null) this.results[s.name] = s.result;
    }
    if (start.failure !== null) this.failure = { text: start.failure, error: new Error(start.failure) };
  }

  /** Drives the saga to `completed` (returns) or `compensated` (throws `SagaFailedError`). */
  async execute(): Promise<SagaResult<O>> {
    if (this.status === 'running') {
      const value = await this.forward();
      if (value !== undefined) return { value: value.result, replayed: false, resumed: this.resumed };
    }
    await this.backward();
    const failure = this.failure ?? { text: 'unknown failure', error: undefined };
    throw new SagaFailedError(this.ref, failure.text, failure.error, false);
  }

  private async forward(): Promise<{ result: O } | undefined> {
    const { steps } = this.definition;
    for (let position = this.cursor; position < steps.length; position++) {
      const step = steps[position]!;
      if (!this.steps.has(position)) await this.register(position, step);
      if (this.steps.get(position)!.state !== 'registered') continue;
      const failed = await this.runAction(position, step);
      if (failed) {
        await this.turnBack(position, failed.error);
        return undefined;
      }
    }
    const result = this.definition.result
      ? this.definition.result(this.results, this.input)
      : (this.results as unknown as O);
    // Stored with its types (the steps' results it is made of keep theirs), and returned as stored,
    // so a replay of the completed saga returns what this run returns.
    const { json, meta } = encodeResult(result, `the result of saga "${this.ref.saga}"`);
    await this.finish({ status: 'completed', from: 'running', result: json, meta });
    return { result: decodeResult(json, meta) as O };
  }

  /** Persists the step and its compensation's key, committed before the action may run. */
  private async register(position: number, step: SagaStep<I, unknown, Client>): Promise<void> {
    await this.point({ at: 'step:registering', position, step: step.name });
    const keys = stepKeys(this.ref, position, step.name);
    const now = this.now();
    await this.engine.sql.transaction(async (tx) => {
      await this.takeFence(tx);
      await this.engine.statements.registerStep(tx, {
        ...this.holder(),
        position,
        name: step.name,
        actionKey: keys.action,
        compensationKey: hasCompensation(step) ? keys.compensation : null,
        now,
      });
    });
    this.steps.set(position, {
      position,
      name: step.name,
      actionKey: keys.action,
      compensationKey: hasCompensation(step) ? keys.compensation : null,
      state: 'registered',
      result: null,
      compensationResult: null,
      compensationAttempts: 0,
      registeredAt: now.getTime(),
      doneAt: null,
      compensatedAt: null,
    });
    await this.point({ at: 'step:registered', position, step: step.name });
  }

  /** Runs the action with retries for retryable failures; returns the failure if it gives up. */
  private async runAction(
    position: number,
    step: SagaStep<I, unknown, Client>,
  ): Promise<{ error: unknown } | undefined> {
    const record = this.steps.get(position)!;
    const jitter = new DecorrelatedJitter(this.engine.backoff);
    for (let attempt = 1; ; attempt++) {
      try {
        const { json, meta } = await this.runBody(
          'action',
          position,
          step.name,
          actionOf(step),
          record.actionKey,
          this.context(record.actionKey, attempt),
        );
        record.state = 'done';
        // As stored (the same types), so later steps see what they would see after a resume.
        record.result = decodeResult(json, meta);
        record.doneAt = this.engine.clock.now();
        this.results[step.name] = record.result;
        this.cursor = position + 1;
        await this.point({ at: 'action:recorded', position, step: step.name });
        return undefined;
      } catch (error) {
        if (error instanceof Halt || isFenced(error)) throw error;
        if (attempt >= this.engine.actionAttempts || !isRetryableStepFailure(error)) return { error };
        await this.engine.clock.sleep(delayFor(error, jitter, this.engine.maxRetryAfterMs));
      }
    }
  }

  /** What every action and compensation gets (`StepContext`); `key` is null for a compensation that has none. */
  private context(key: string | null, attempt: number): object {
    return { input: this.input, key, saga: this.ref, results: { ...this.results }, attempt };
  }

  /**
   * Runs an action or a compensation through the step engine, with the hook points around it: a
   * function inside one short transaction (the points inside it too, so a "crash" there rolls it
   * back); `{ call, record? }` with no transaction while it calls, then `record` and the step's
   * record (`stepDone` or `stepCompensated`) in one short transaction. `body` null: nothing to
   * run (a step without a compensation), the result is null.
   */
  private runBody(
    direction: 'action' | 'compensation',
    position: number,
    step: string,
    body: StepBody | null,
    key: string,
    context: object,
  ): Promise<StepResult<unknown>> {
    const points = { before: `${direction}:before`, after: `${direction}:after` } as const;
    const statement = direction === 'action' ? 'stepDone' : 'stepCompensated';
    const write = async (tx: Transaction<Client>, json: string, meta: string | null) => {
      const step = { ...this.holder(), position, result: json, meta, now: this.now() };
      await this.fenced(this.engine.statements[statement](tx, step));
    };
    const runner = this.engine.runner;
    if (body === null || 'local' in body) {
      return runLocalStep(runner, this.lease, {
        point: step,
        key,
        run: async (tx) => {
          await this.point({ at: points.before, position, step });
          const value = body === null ? null : await body.local({ ...context, tx });
          await this.point({ at: points.after, position, step });
          return value;
        },
        record: write,
      });
    }
    return runCallStep(runner, this.lease, {
      name: step,
      key,
      call: async ({ signal }) => {
        await this.point({ at: points.before, position, step });
        const value = await body.call({ ...context, signal });
        await this.point({ at: points.after, position, step });
        return value;
      },
      record: (_sql, response, json, meta) =>
        inHeldTransaction(runner, this.lease, step, async (tx) => {
          await body.record?.({ ...context, tx, response });
          await write(tx, json, meta);
        }),
    });
  }

  private async turnBack(position: number, error: unknown): Promise<void> {
    const text = describe(error);
    await this.engine.sql.transaction(async (tx) => {
      const turn = { ...this.holder(), position, error: text, now: this.now() };
      await this.fenced(this.engine.statements.startCompensating(tx, turn));
    });
    this.failure = { text, error };
    this.status = 'compensating';
    this.cursor = position;
    await this.point({ at: 'saga:compensating', position });
  }

  /** Compensates every started step from the cursor down, each exactly once, then finishes. */
  private async backward(): Promise<void> {
    for (let position = this.cursor; position >= 0; position--) {
      const record = this.steps.get(position);
      if (!record || record.state === 'compensated') continue;
      await this.compensate(position, record);
    }
    await this.finish({ status: 'compensated', from: 'compensating', result: null, meta: null });
  }

  /**
   * Ends the saga, fenced, from the direction it ran in: completed forward with its result, or
   * compensated backward without one.
   */
  private async finish(end: {
    status: 'completed' | 'compensated';
    from: 'running' | 'compensating';
    result: string | null;
    meta: string | null;
  }): Promise<void> {
    await this.engine.sql.transaction(async (tx) => {
      await this.fenced(this.engine.statements.finish(tx, { ...this.holder(), ...end, now: this.now() }));
      await this.point({ at: 'saga:finishing', status: end.status });
    });
    await this.point({ at: 'saga:finished', status: end.status });
  }

  private async compensate(position: number, record: SagaStepRecord): Promise<void> {
    const step = this.definition.steps[position]!;
    const jitter = new DecorrelatedJitter(this.engine.backoff);
    const key = record.compensationKey;
    const body = key !== null ? compensationOf(step) : null;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.runBody('compensation', position, step.name, body, key ?? record.actionKey, {
          ...this.context(key, attempt),
          actionKey: record.actionKey,
          actionCompleted: record.doneAt !== null,
          result: record.doneAt !== null ? record.result : undefined,
        });
        record.state = 'compensated';
        this.cursor = position - 1;
        await this.point({ at: 'compensation:recorded', position, step: step.name });
        return;
      } catch (error) {
        if (error instanceof Halt || isFenced(error)) throw error;
        // Any failure of a compensation is retried: there is no going back from going back.
        const { statements, sql } = this.engine;
        const counted = await statements.compensationFailed(sql, { ...this.holder(), position });
        if (!counted) throw new FencedError(sagaScope(this.ref), this.fence);
        const failures = Number(counted.compensation_attempts);
        if (failures >= this.engine.compensationAttempts) {
          await this.fenced(
            statements.markStuck(sql, {
              ...this.holder(),
              error: `step ${step.name}: ${describe(error)}`,
              now: this.now(),
            }),
          );
          this.engine.events.emit('saga:stuck', { saga: this.ref, step: step.name, error });
          throw new SagaStuckError(this.ref, step.name, error);
        }
        await this.engine.clock.sleep(delayFor(error, jitter, this.engine.maxRetryAfterMs));
      }
    }
  }

  /** Checks the fence and direction, renews the lease, and row-locks the saga for this transaction. */
  private async takeFence(tx: Queryable): Promise<void> {
    await this.fenced(this.engine.statements.fence(tx, this.fenceInput()));
  }

  /** The fence check's input: this holder, a renewed lease, and the direction it goes. */
  private fenceInput() {
    return {
      ...this.holder(),
      leaseUntil: new Date(this.engine.clock.now() + this.engine.leaseMs),
      now: this.now(),
      status: this.status,
    };
  }

  /** Waits for a fenced write; `FencedError` when it touched no row (the saga was taken over). */
  private async fenced(written: Promise<number>): Promise<void> {
    if ((await written) !== 1) throw new FencedError(sagaScope(this.ref), this.fence);
  }

  private async point(point: SagaPoint): Promise<void> {
    const hooks = this.engine.hooks;
    if (!hooks) return;
    try {
      await hooks.at(point, this.ref);
    } catch (error) {
      throw new Halt(error);
    }
  }

  /** This holder, as every fenced statement names it. */
  private holder(): Holder {
    return { ref: this.ref, fence: this.fence };
  }

  private now(): Date {
    return new Date(this.engine.clock.now());
  }
}

/**
 * The wait before the next attempt: a downstream's ask (`retryAfterMs`, from its Retry-After) when
 * it made one, capped at `maxRetryAfterMs` as everywhere; otherwise the backoff's.
 */
function delayFor(error: unknown, jitter: DecorrelatedJitter, maxRetryAfterMs: number): number {
  const asked = (error as { retryAfterMs?: unknown } | null)?.retryAfterMs;
  return typeof asked === 'number' && asked >= 0 ? retryDelay(0, asked, maxRetryAfterMs) : jitter.next();
}

export const describe = describeFailure;
