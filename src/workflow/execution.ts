import { FencedError, InvalidArgumentError, isFenced, type OperationScope } from '../core/errors.js';
import { deriveKey } from '../core/keys.js';
import type { Transaction } from '../core/sql.js';
import { DecorrelatedJitter } from '../client/backoff.js';
import { isRetryableFailure } from '../client/classify.js';
import { withIdempotencyKey } from '../core/key-context.js';
import type { SagaDefinition, SagaPoint, SagaRef, SagaStep } from './definition.js';
import { SagaFailedError, SagaStuckError } from './errors.js';
import type { SagaStatus, SagaStepRecord } from './saga-record.js';
import type { Sagas } from './sagas.js';

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

/**
 * One holder's run of one saga instance, from a claim or takeover to a final state. Every write
 * checks the fence; every step runs in a transaction that first takes the fence (row-locking the
 * saga), then runs the action or compensation, then records it and moves the cursor.
 */
export class SagaExecution<I, O, Client> {
  private readonly results: Record<string, unknown> = {};
  private readonly steps = new Map<number, SagaStepRecord>();
  private failure: { text: string; error: unknown } | null = null;

  constructor(
    private readonly engine: Sagas<Client>,
    private readonly definition: SagaDefinition<I, O, Client>,
    private readonly ref: SagaRef,
    private readonly input: I,
    private fence: number,
    private status: 'running' | 'compensating',
    private cursor: number,
    steps: SagaStepRecord[],
    failureText: string | null,
    private readonly resumed: boolean,
  ) {
    for (const s of steps) {
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
    if (failureText !== null) this.failure = { text: failureText, error: new Error(failureText) };
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
    const json = JSON.stringify(result ?? null);
    await this.engine.sql.transaction(async (tx) => {
      await this.write(tx, 'finish', [this.fence, 'completed', json, this.now(), 'running']);
      await this.point({ at: 'saga:finishing', status: 'completed' });
    });
    await this.point({ at: 'saga:finished', status: 'completed' });
    return { result: JSON.parse(json) as O };
  }

  /** Persists the step and its compensation's key, committed before the action may run. */
  private async register(position: number, step: SagaStep<I, unknown, Client>): Promise<void> {
    await this.point({ at: 'step:registering', position, step: step.name });
    const keys = stepKeys(this.ref, position, step.name);
    const now = this.now();
    await this.engine.sql.transaction(async (tx) => {
      await this.takeFence(tx);
      await tx.query(this.engine.statements.registerStep, [
        ...this.pk(),
        this.fence,
        position,
        step.name,
        keys.action,
        step.compensate ? keys.compensation : null,
        now,
      ]);
    });
    this.steps.set(position, {
      position,
      name: step.name,
      actionKey: keys.action,
      compensationKey: step.compensate ? keys.compensation : null,
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
        const json = await this.engine.sql.transaction(async (tx) => {
          await this.takeFence(tx);
          await this.point({ at: 'action:before', position, step: step.name });
          const value = await withIdempotencyKey(record.actionKey, () =>
            step.action({
              input: this.input,
              tx,
              key: record.actionKey,
              saga: this.ref,
              results: { ...this.results },
              attempt,
            }),
          );
          await this.point({ at: 'action:after', position, step: step.name });
          const text = JSON.stringify(value ?? null);
          await this.write(tx, 'stepDone', [this.fence, position, text, this.now()]);
          return text;
        });
        record.state = 'done';
        record.result = JSON.parse(json) as unknown;
        record.doneAt = this.engine.clock.now();
        this.results[step.name] = record.result;
        this.cursor = position + 1;
        await this.point({ at: 'action:recorded', position, step: step.name });
        return undefined;
      } catch (error) {
        if (error instanceof Halt || isFenced(error)) throw error;
        if (attempt >= this.engine.actionAttempts || !isRetryableFailure(error)) return { error };
        await this.engine.clock.sleep(delayFor(error, jitter, this.engine.maxRetryAfterMs));
      }
    }
  }

  private async turnBack(position: number, error: unknown): Promise<void> {
    const text = describe(error);
    await this.engine.sql.transaction(async (tx) => {
      await this.write(tx, 'startCompensating', [this.fence, position, text, this.now()]);
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
    await this.engine.sql.transaction(async (tx) => {
      await this.write(tx, 'finish', [this.fence, 'compensated', null, this.now(), 'compensating']);
      await this.point({ at: 'saga:finishing', status: 'compensated' });
    });
    await this.point({ at: 'saga:finished', status: 'compensated' });
  }

  private async compensate(position: number, record: SagaStepRecord): Promise<void> {
    const step = this.definition.steps[position]!;
    const jitter = new DecorrelatedJitter(this.engine.backoff);
    for (let attempt = 1; ; attempt++) {
      try {
        await this.engine.sql.transaction(async (tx) => {
          await this.takeFence(tx);
          await this.point({ at: 'compensation:before', position, step: step.name });
          let value: unknown = null;
          if (step.compensate && record.compensationKey !== null) {
            const key = record.compensationKey;
            value = await withIdempotencyKey(key, () =>
              step.compensate!({
                input: this.input,
                tx,
                key,
                actionKey: record.actionKey,
                actionCompleted: record.doneAt !== null,
                result: record.doneAt !== null ? record.result : undefined,
                saga: this.ref,
                results: { ...this.results },
                attempt,
              }),
            );
          }
          await this.point({ at: 'compensation:after', position, step: step.name });
          await this.write(tx, 'stepCompensated', [
            this.fence,
            position,
            JSON.stringify(value ?? null),
            this.now(),
          ]);
        });
        record.state = 'compensated';
        this.cursor = position - 1;
        await this.point({ at: 'compensation:recorded', position, step: step.name });
        return;
      } catch (error) {
        if (error instanceof Halt || isFenced(error)) throw error;
        // Any failure of a compensation is retried: there is no going back from going back.
        const { rows } = await this.engine.sql.query<{ compensation_attempts: number }>(
          this.engine.statements.compensationFailed,
          [...this.pk(), this.fence, position],
        );
        if (!rows[0]) throw new FencedError(sagaScope(this.ref), this.fence);
        const failures = Number(rows[0].compensation_attempts);
        if (failures >= this.engine.compensationAttempts) {
          const { rowCount } = await this.engine.sql.query(this.engine.statements.markStuck, [
            ...this.pk(),
            this.fence,
            `step ${step.name}: ${describe(error)}`,
            this.now(),
          ]);
          if (rowCount !== 1) throw new FencedError(sagaScope(this.ref), this.fence);
          this.engine.onStuck?.(this.ref, step.name, error);
          throw new SagaStuckError(this.ref, step.name, error);
        }
        await this.engine.clock.sleep(delayFor(error, jitter, this.engine.maxRetryAfterMs));
      }
    }
  }

  /** Checks the fence and direction, renews the lease, and row-locks the saga for this transaction. */
  private async takeFence(tx: Transaction<Client>): Promise<void> {
    const { rowCount } = await tx.query(this.engine.statements.fence, [
      ...this.pk(),
      this.fence,
      new Date(this.engine.clock.now() + this.engine.leaseMs),
      this.now(),
      this.status satisfies SagaStatus,
    ]);
    if (rowCount !== 1) throw new FencedError(sagaScope(this.ref), this.fence);
  }

  private async write(
    tx: Transaction<Client>,
    statement: 'finish' | 'stepDone' | 'startCompensating' | 'stepCompensated',
    params: unknown[],
  ): Promise<void> {
    const { rowCount } = await tx.query(this.engine.statements[statement], [...this.pk(), ...params]);
    if (rowCount !== 1) throw new FencedError(sagaScope(this.ref), this.fence);
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

  private pk(): [string, string, string] {
    return [this.ref.tenant, this.ref.saga, this.ref.key];
  }

  private now(): Date {
    return new Date(this.engine.clock.now());
  }
}

function delayFor(error: unknown, jitter: DecorrelatedJitter, cap: number): number {
  const asked = (error as { retryAfterMs?: unknown } | null)?.retryAfterMs;
  return typeof asked === 'number' && asked >= 0 && asked <= cap ? asked : jitter.next();
}

export function describe(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.slice(0, 2000);
}
