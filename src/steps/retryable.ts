import { isRetryableFailure, isRetryableStatus } from '../core/resilience/classify.js';

/**
 * Whether a step's or call's failure may go away on a retry of the same key: what
 * `isRetryableFailure` says (transient SQLSTATEs, network errors, timeouts, errors flagged
 * `retryable`), and also an error that carries an HTTP status a retry may change (408, 425, 429,
 * 5xx except 501) the way frameworks' exceptions do (`status`, `statusCode` or `getStatus()`, e.g.
 * NestJS's `HttpException('provider down', 503)`). An explicit `retryable` flag wins. The rest —
 * a constraint violation, 22021, a 4xx from a downstream — fails the same way every time.
 */
export function isRetryableStepFailure(error: unknown): boolean {
  if (isRetryableFailure(error)) return true;
  if (typeof error !== 'object' || error === null) return false;
  if (typeof (error as { retryable?: unknown }).retryable === 'boolean') return false;
  const status = httpStatusOf(error);
  return status !== undefined && isRetryableStatus(status);
}

function httpStatusOf(error: object): number | undefined {
  const { status, statusCode, getStatus } = error as {
    status?: unknown;
    statusCode?: unknown;
    getStatus?: unknown;
  };
  if (typeof getStatus === 'function') {
    const value: unknown = (getStatus as () => unknown).call(error);
    if (typeof value === 'number') return value;
  }
  if (typeof status === 'number') return status;
  if (typeof statusCode === 'number') return statusCode;
  return undefined;
}
