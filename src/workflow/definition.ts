import { InvalidArgumentError } from '../core/errors.js';
import { validateName } from '../core/keys.js';
import type { Transaction } from '../core/sql.js';

/** Names one saga instance: the intent. */
export interface SagaRef {
  tenant: string;
  /** The saga definition's name. */
  saga: string;
  /** The instance's key, e.g. `order-123`. */
  key: string;
}

/** What an action gets. */
export interface ActionContext<I, Client = unknown> {
  input: I;
  /**
   * The step's transaction. It holds the saga's fence (a takeover waits for it) and commits with
   * the step's recorded result, so local writes made through it happen exactly once.
   */
  tx: Transaction<Client>;
  /**
   * The action's idempotency key: derived from (tenant, saga, key, position, step name), the
   * same on every retry, crash and takeover, and different for every step and for the
   * compensation. Send it downstream. The outgoing client (`idem/client`) picks it up by itself.
   */
  key: string;
  saga: SagaRef;
  /** Results of the steps recorded so far, by step name. */
  results: Readonly<Record<string, unknown>>;
  /** 1 for the first attempt in this process, then 2, 3, … on retries. */
  attempt: number;
}

/** What a compensation gets. */
export interface CompensationContext<I, R, Client = unknown> extends ActionContext<I, Client> {
  /** The compensation's own key (distinct from the action's). */
  key: string;
  /** The action's key: look the effect up by it when `actionCompleted` is false. */
  actionKey: string;
  /**
   * True when the action's result was recorded. False when its outcome is unknown: it failed
   * (possibly after its effect, e.g. a timeout) or the process died before recording. The
   * compensation then must undo the effect if there was one and do nothing otherwise; with a
   * downstream that honours idempotency keys, "refund the charge made with `actionKey`" does that.
   */
  actionCompleted: boolean;
  /** The action's recorded result, when `actionCompleted`. */
  result: R | undefined;
}

/** One step: an action and, usually, how to undo it. */
export interface SagaStep<I = unknown, R = unknown, Client = unknown> {
  /** Unique within the saga. Part of the derived keys: renaming a step changes its keys. */
  name: string;
  action(context: ActionContext<I, Client>): Promise<R>;
  /**
   * Undoes the action. Persisted (its key and the step) before the action runs, run at most
   * once to completion, in reverse order, when a later step fails. Must be idempotent toward the
   * outside world through its `key`. Omit it for steps with nothing to undo (a read).
   */
  compensate?(context: CompensationContext<I, R, Client>): Promise<unknown>;
}

/** A saga: a name and its steps, in order. */
export interface SagaDefinition<I = unknown, O = unknown, Client = unknown> {
  name: string;
  steps: readonly SagaStep<I, unknown, Client>[];
  /** Builds the saga's result from the step results. Default: the results by step name. */
  result?(results: Readonly<Record<string, unknown>>, input: I): O;
}

/**
 * Declares a saga. Step names must be unique. Keep a saga's steps append-only while instances
 * may be in flight: a resumed instance checks that each recorded step still has its name.
 *
 * @example
 * const checkout = defineSaga<{ orderId: string; amount: number }>({
 *   name: 'checkout',
 *   steps: [
 *     step({ name: 'reserve', action: ({ input, key }) => stock.reserve(input.orderId, key),
 *            compensate: ({ key, actionKey }) => stock.release(actionKey, key) }),
 *     step({ name: 'charge', action: ({ input, key }) => payments.charge(input.amount, key),
 *            compensate: ({ key, actionKey }) => payments.refundByKey(actionKey, key) }),
 *   ],
 * });
 */
export function defineSaga<I, O = Record<string, unknown>, Client = unknown>(
  definition: SagaDefinition<I, O, Client>,
): SagaDefinition<I, O, Client> {
  validateName('saga name', definition.name);
  if (definition.steps.length === 0) throw new InvalidArgumentError('a saga needs at least one step');
  const names = new Set<string>();
  for (const s of definition.steps) {
    validateName('step name', s.name);
    if (names.has(s.name)) throw new InvalidArgumentError(`duplicate step name: ${s.name}`);
    names.add(s.name);
  }
  return definition;
}

/** Types one step (its result type flows from `action` to `compensate`). */
export function step<I, R, Client = unknown>(
  definition: SagaStep<I, R, Client>,
): SagaStep<I, unknown, Client> {
  return definition;
}

/** The points a saga passes, in order, for fault-injection hooks (see `SagasOptions.hooks`). */
export type SagaPoint =
  | { at: 'saga:started' }
  | { at: 'step:registering'; position: number; step: string }
  | { at: 'step:registered'; position: number; step: string }
  | { at: 'action:before'; position: number; step: string }
  | { at: 'action:after'; position: number; step: string }
  | { at: 'action:recorded'; position: number; step: string }
  | { at: 'saga:compensating'; position: number }
  | { at: 'compensation:before'; position: number; step: string }
  | { at: 'compensation:after'; position: number; step: string }
  | { at: 'compensation:recorded'; position: number; step: string }
  | { at: 'saga:finishing'; status: 'completed' | 'compensated' }
  | { at: 'saga:finished'; status: 'completed' | 'compensated' };
