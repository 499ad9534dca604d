export { CircuitOpenError, isCircuitOpen } from '../core/resilience/circuit-breaker.js';
import { IdemError, isIdemError } from '../core/errors.js';

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

export const isHttpStatusError = (e: unknown): e is HttpStatusError =>
  isIdemError(e) && e.code === 'IDEM_HTTP_STATUS';
