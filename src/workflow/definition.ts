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
   * work, and write a call to the outside world as the step's `call`.
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

/** What `compensateCall` gets: no transaction. */
export interface CompensationCallContext<I, R> extends ActionCallContext<I>, CompensationFacts<R> {}

/** What `recordCompensation` gets: the step's transaction and the compensation call's answer. */
export interface CompensationRecordContext<I, R, Client = unknown> extends CompensationContext<I, R, Client> {
  /** What `compensateCall` returned (also the compensation's recorded result). */
  response: unknown;
}

/** A step whose action is local: `action` runs inside the step's transaction. */
export interface LocalAction<I, R, Client = unknown> {
  /**
   * Runs inside the step's short transaction (`tx`), which commits with the recorded result.
   * Keep it to database work: anything that leaves the database belongs in `call`.
   */
  action(context: ActionContext<I, Client>): Promise<R>;
  call?: never;
  record?: never;
}

/**
 * A step whose action calls the outside world: `call` runs with no transaction and no pooled
 * connection held (the fence is checked before it, a heartbeat keeps the lease while it runs);
 * then one short transaction checks the fence again, runs `record` (optional local writes that
 * go with the answer) and records the step's result, all committed together.
 */
export interface CallAction<I, R, Client = unknown> {
  call(context: ActionCallContext<I>): Promise<R>;
  record?(context: ActionRecordContext<I, R, Client>): Promise<unknown>;
  action?: never;
}

/** How a step is undone locally: `compensate` runs inside the step's transaction. */
export interface LocalCompensation<I, R, Client = unknown> {
  /**
   * Undoes the action inside a short transaction (`tx`). Persisted (its key and the step) before
   * the action runs, run at most once to completion, in reverse order, when a later step fails.
   * Omit it (and `compensateCall`) for steps with nothing to undo (a read).
   */
  compensate?(context: CompensationContext<I, R, Client>): Promise<unknown>;
  compensateCall?: never;
  recordCompensation?: never;
}

/** How a step is undone by calling the outside world, run like `call`. */
export interface CallCompensation<I, R, Client = unknown> {
  /**
   * Undoes the action by calling out, with no transaction held; must be idempotent toward the
   * outside world through its `key`. Persisted before the action runs, run at most once to
   * completion, in reverse order, when a later step fails.
   */
  compensateCall(context: CompensationCallContext<I, R>): Promise<unknown>;
  /** Local writes that go with the compensation's answer, committed with its record. */
  recordCompensation?(context: CompensationRecordContext<I, R, Client>): Promise<unknown>;
  compensate?: never;
}

/**
 * One step: what it does — `action` (local: it gets `tx`) or `call` (to the outside world, with
 * no transaction held; `record` for the local writes that go with its answer) — and, usually, how
 * to undo it — `compensate` (local) or `compensateCall` (calls out; `recordCompensation`).
 */
export type SagaStep<I = unknown, R = unknown, Client = unknown> = {
  /** Unique within the saga. Part of the derived keys: renaming a step changes its keys. */
  name: string;
} & (LocalAction<I, R, Client> | CallAction<I, R, Client>) &
  (LocalCompensation<I, R, Client> | CallCompensation<I, R, Client>);

/** A step as the engine reads it, whatever its input, result and client types (not in `idem/workflow`). */
export interface AnyStep {
  name: string;
  action?: StepFunction;
  call?: StepFunction;
  record?: StepFunction;
  compensate?: StepFunction;
  compensateCall?: StepFunction;
  recordCompensation?: StepFunction;
}
type StepFunction = (context: never) => Promise<unknown>;

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
 *     step({ name: 'reserve', call: ({ input, key }) => stock.reserve(input.orderId, key),
 *            compensateCall: ({ key, actionKey }) => stock.release(actionKey, key) }),
 *     step({ name: 'charge', call: ({ input, key }) => payments.charge(input.amount, key),
 *            record: ({ tx, input, response }) => markCharged(tx, input.orderId, response.id),
 *            compensateCall: ({ key, actionKey }) => payments.refundByKey(actionKey, key) }),
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
    checkStep(s);
  }
  return definition;
}

/** Exactly one of `action` / `call`; at most one of `compensate` / `compensateCall`; no stray record. */
function checkStep(s: AnyStep): void {
  const given = (field: keyof AnyStep) => s[field] !== undefined;
  const fn = (field: keyof AnyStep) => typeof s[field] === 'function';
  const problem = (what: string) => new InvalidArgumentError(`step ${s.name}: ${what}`);
  if (given('action') === given('call'))
    throw problem('give exactly one of action (local) or call (outside)');
  if (given('action') ? !fn('action') : !fn('call')) throw problem('action / call must be a function');
  if (given('record') && (given('action') || !fn('record')))
    throw problem('record goes with call, as a function');
  if (given('compensate') && given('compensateCall')) {
    throw problem('give at most one of compensate (local) or compensateCall (outside)');
  }
  for (const field of ['compensate', 'compensateCall', 'recordCompensation'] as const) {
    if (given(field) && !fn(field)) throw problem(`${field} must be a function`);
  }
  if (given('recordCompensation') && !given('compensateCall')) {
    throw problem('recordCompensation goes with compensateCall');
  }
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
