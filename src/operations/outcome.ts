import type { ResourcePointer } from '../core/errors.js';

const outcomeBrand = Symbol.for('idem.outcome');

/** How an operation ended: `completed`, or `failed` for a declared business refusal. */
export type FinalState = 'completed' | 'failed';

/** Extra things stored with a result. */
export interface OutcomeOptions {
  /** What the operation created. It outlives the stored result, in the key's tombstone. */
  resource?: ResourcePointer;
  /** Raw bytes stored beside the result and replayed exactly (an HTTP body, say). */
  body?: Uint8Array;
}

/** A handler's result with its final state. Make one with `completed()` or `refused()`. */
export interface Outcome<T> extends OutcomeOptions {
  readonly [outcomeBrand]: true;
  state: FinalState;
  value: T;
}

/** Ends an operation successfully, with a resource pointer or binary body stored beside the value. */
export function completed<T>(value: T, options: OutcomeOptions = {}): Outcome<T> {
  return { [outcomeBrand]: true, state: 'completed', value, ...options };
}

/**
 * Ends an operation with a business refusal (a declined card, say). Unlike a thrown error, the
 * refusal commits with the handler's writes and is replayed to every retry, like a success.
 */
export function refused<T>(value: T, options: OutcomeOptions = {}): Outcome<T> {
  return { [outcomeBrand]: true, state: 'failed', value, ...options };
}

/**
 * True for a value made by `completed(…)` or `refused(…)` (a brand check).
 *
 * @example
 * const value = await handler(tx, context);
 * const outcome = isOutcome(value) ? value : completed(value);
 */
export function isOutcome(value: unknown): value is Outcome<unknown> {
  return (
    typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[outcomeBrand] === true
  );
}

export function toOutcome<T>(value: T | Outcome<T>): Outcome<T> {
  return isOutcome(value) ? value : completed(value);
}

/** What a caller gets back from an operation. */
export interface OperationResult<T> {
  /** The handler's value; on a replay, the stored value parsed from JSON. */
  value: T;
  state: FinalState;
  /** True when the handler did not run and the stored result was returned. */
  replayed: boolean;
  resource: ResourcePointer | null;
  body: Uint8Array | null;
}

/** What a caller gets from a handler that ran now (not a replay). */
export function freshResult<T>(outcome: Outcome<T>): OperationResult<T> {
  return {
    value: outcome.value,
    state: outcome.state,
    replayed: false,
    resource: outcome.resource ?? null,
    body: outcome.body ?? null,
  };
}
