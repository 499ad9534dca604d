import { IdemError, isIdemError } from '../core/errors.js';

/**
 * The circuit breaker of this downstream is open (or a half-open probe is in flight): the call
 * was not sent. Retryable later; `retryAfterMs` is when the breaker will let a probe through.
 */
export class CircuitOpenError extends IdemError {
  constructor(
    readonly origin: string,
    readonly retryAfterMs: number,
    cause?: unknown,
  ) {
    super('IDEM_CIRCUIT_OPEN', `circuit open for ${origin}: failing fast`, { cause, retryable: true });
  }
}

/**
 * A downstream answered with a failing status. `retryable` follows the classification (408, 425,
 * 429, 5xx except 501); `retryAfterMs` carries its Retry-After. Thrown by `assertOk`.
 */
export class HttpStatusError extends IdemError {
  constructor(
    readonly status: number,
    readonly url: string,
    retryable: boolean,
    readonly retryAfterMs: number | undefined,
    readonly body: string,
  ) {
    super('IDEM_HTTP_STATUS', `${url} answered ${status}`, { cause: undefined, retryable });
  }
}

/**
 * True for a `CircuitOpenError`: the breaker refused the call without sending it.
 *
 * @example
 * try {
 *   await client.fetch(url, { method: 'POST', key, body });
 * } catch (error) {
 *   if (isCircuitOpen(error)) return queueForLater(); // nothing was sent
 *   throw error;
 * }
 */
export const isCircuitOpen = (e: unknown): e is CircuitOpenError =>
  isIdemError(e) && e.code === 'IDEM_CIRCUIT_OPEN';
/**
 * True for an `HttpStatusError` (`assertOk` on a non-2xx answer), with its `status`, `retryable`
 * and `retryAfterMs`.
 *
 * @example
 * if (isHttpStatusError(error) && error.status === 404) return null;
 */
export const isHttpStatusError = (e: unknown): e is HttpStatusError =>
  isIdemError(e) && e.code === 'IDEM_HTTP_STATUS';
