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

/** What every action and compensation gets, whichever its kind. */
export interface StepContext<I> {
  input: I;
  /**
   * The idempotency key of this action (or compensation): derived from (tenant, saga, key,
   * position, step name), the same on every retry, crash and takeover, and different for every
   * step and for the compensation. Send it downstream. The outgoing client (`idem/client`) picks
   * it up by itself.
   */
  key: string;
  saga: SagaRef;
  /** Results of the steps recorded so far, by step name. */
  results: Readonly<Record<string, unknown>>;
  /** 1 for the first attempt in this process, then 2, 3, … on retries. */
  attempt: number;
}

/** What a local action gets: the step's transaction. */
export interface ActionContext<I, Client = unknown> extends StepContext<I> {
  /**
   * The step's transaction. It holds the saga's fence (a takeover waits for it) and commits with
   * the step's recorded result, so local writes made through it happen exactly once. It stays
   * open (a pooled connection and a row lock) while the action runs: keep the action to database
   * work, and write a call to the outside world as `{ call }`.
   */
  tx: Transaction<Client>;
}

/** What an action's `call` gets: no transaction. */
export interface ActionCallContext<I> extends StepContext<I> {
  /**
   * Aborted when this process lost the saga to a takeover while the call ran (its heartbeat found
   * the fence raised). Pass it to `fetch` or your client: the result is refused either way, and
   * the new holder repeats the call with the same key.
   */
  signal: AbortSignal;
}

/** What an action's `record` gets: the step's transaction and the call's answer. */
export interface ActionRecordContext<I, R, Client = unknown> extends ActionContext<I, Client> {
  /** What `call` returned (also the step's recorded result). */
  response: R;
}

/**
 * An action that calls the outside world: `call` runs with no transaction and no pooled
 * connection held (a short transaction checks the fence before it, a heartbeat keeps the lease
 * while it runs); then one short transaction checks the fence again, runs `record` (optional
 * local writes that go with the answer) and records the step's result, all committed together.
 */
export interface CallAction<I, R, Client = unknown> {
  call(context: ActionCallContext<I>): Promise<R>;
  record?(context: ActionRecordContext<I, R, Client>): Promise<unknown>;
}

/**
 * What a step does: a function is a local action (it gets `tx`, and runs inside the step's
 * transaction); `{ call, record? }` calls the outside world outside any transaction.
 */
export type SagaAction<I, R, Client = unknown> =
  ((context: ActionContext<I, Client>) => Promise<R>) | CallAction<I, R, Client>;

/** What every compensation knows about the action it undoes. */
export interface CompensationFacts<R> {
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

/** What a local compensation gets. `key` is the compensation's own (distinct from the action's). */
export interface CompensationContext<I, R, Client = unknown>
  extends ActionContext<I, Client>, CompensationFacts<R> {}

/** What a compensation's `call` gets: no transaction. */
export interface CompensationCallContext<I, R> extends ActionCallContext<I>, CompensationFacts<R> {}

/** What a compensation's `record` gets: the step's transaction and the call's answer. */
export interface CompensationRecordContext<I, R, Client = unknown> extends CompensationContext<I, R, Client> {
  /** What the compensation's `call` returned (also its recorded result). */
  response: unknown;
}

/** A compensation that calls the outside world, run like a `CallAction`. */
export interface CallCompensation<I, R, Client = unknown> {
  call(context: CompensationCallContext<I, R>): Promise<unknown>;
  record?(context: CompensationRecordContext<I, R, Client>): Promise<unknown>;
}

/** How a step is undone: a function runs in the step's transaction; `{ call, record? }` calls out. */
export type SagaCompensation<I, R, Client = unknown> =
  ((context: CompensationContext<I, R, Client>) => Promise<unknown>) | CallCompensation<I, R, Client>;

/** One step: an action and, usually, how to undo it. */
export interface SagaStep<I = unknown, R = unknown, Client = unknown> {
  /** Unique within the saga. Part of the derived keys: renaming a step changes its keys. */
  name: string;
  /**
   * What the step does. A function is local: it runs inside the step's transaction (`tx`).
   * `{ call, record? }` calls the outside world with no transaction held. Anything that leaves
   * the database (an HTTP call, a broker publish) belongs in `call`.
   */
  action: SagaAction<I, R, Client>;
  /**
   * Undoes the action. Persisted (its key and the step) before the action runs, run at most
   * once to completion, in reverse order, when a later step fails. Must be idempotent toward the
   * outside world through its `key`. Omit it for steps with nothing to undo (a read). A function
   * is local (`tx`); `{ call, record? }` calls out with no transaction held.
   */
  compensate?: SagaCompensation<I, R, Client>;
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
 *     step({ name: 'reserve', action: { call: ({ input, key }) => stock.reserve(input.orderId, key) },
 *            compensate: { call: ({ key, actionKey }) => stock.release(actionKey, key) } }),
 *     step({ name: 'charge', action: { call: ({ input, key }) => payments.charge(input.amount, key) },
 *            compensate: { call: ({ key, actionKey }) => payments.refundByKey(actionKey, key) } }),
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
    if (!isStepBody(s.action)) {
      throw new InvalidArgumentError(`step ${s.name}: action must be a function or { call, record? }`);
    }
    if (s.compensate !== undefined && !isStepBody(s.compensate)) {
      throw new InvalidArgumentError(`step ${s.name}: compensate must be a function or { call, record? }`);
    }
  }
  return definition;
}

function isStepBody(body: unknown): boolean {
  if (typeof body === 'function') return true;
  if (typeof body !== 'object' || body === null) return false;
  const { call, record } = body as { call?: unknown; record?: unknown };
  return typeof call === 'function' && (record === undefined || typeof record === 'function');
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
