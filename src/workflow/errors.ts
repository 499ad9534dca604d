import { IdemError, isIdemError } from '../core/errors.js';
import type { SagaRef } from './definition.js';

/**
 * A step failed for good, and every started step was compensated: the saga ended in
 * `compensated`. `cause` is the step's error (on a replay, an `Error` carrying its stored text).
 */
export class SagaFailedError extends IdemError {
  constructor(
    readonly saga: SagaRef,
    readonly failure: string,
    cause: unknown,
    /** True when this is the stored outcome of an earlier run. */
    readonly replayed: boolean,
  ) {
    super('IDEM_SAGA_FAILED', `saga ${saga.saga} ${saga.key} failed and was compensated: ${failure}`, {
      cause,
      retryable: false,
    });
  }
}

/**
 * A compensation kept failing after its retries: the saga is parked as `stuck` and waits for an
 * operator (`sagas.list({ status: ['stuck'] })`, then `sagas.retry(ref)` once the cause is fixed).
 * Nothing was swallowed: the compensation's error is `cause`.
 */
export class SagaStuckError extends IdemError {
  constructor(
    readonly saga: SagaRef,
    readonly step: string | null,
    cause: unknown,
  ) {
    super(
      'IDEM_SAGA_STUCK',
      `saga ${saga.saga} ${saga.key} is stuck compensating${step ? ` step ${step}` : ''}: it needs an operator`,
      { cause, retryable: false },
    );
  }
}

/**
 * True for a `SagaFailedError`: a step failed for good and every started step was compensated.
 *
 * @example
 * try {
 *   await sagas.run(checkout, { tenant: 'acme', key: `order-${orderId}`, input });
 * } catch (error) {
 *   if (isSagaFailed(error)) return res.status(402).json({ failure: error.failure });
 *   throw error;
 * }
 */
export const isSagaFailed = (e: unknown): e is SagaFailedError =>
  isIdemError(e) && e.code === 'IDEM_SAGA_FAILED';
/**
 * True for a `SagaStuckError`: a compensation kept failing; the saga waits for an operator.
 *
 * @example
 * if (isSagaStuck(error)) pageOnCall(`saga ${error.saga.key} stuck at ${error.step}`);
 */
export const isSagaStuck = (e: unknown): e is SagaStuckError =>
  isIdemError(e) && e.code === 'IDEM_SAGA_STUCK';
