import { isRetryable } from '../retryable.js';
import { isRetryableStatus, isUnhealthyStatus } from './http-failure.js';
import { parseRetryAfter } from './retry-after.js';

export { isRetryableStatus };

/**
 * How a failure is classified. `retryable`: the same request (with the same key) may succeed if
 * sent again. `unhealthy`: the failure says the downstream is in trouble, so it counts toward
 * opening the circuit breaker (a 4xx about our own request does not).
 */
export interface Classification {
  retryable: boolean;
  unhealthy: boolean;
  /** The wait the downstream asked for (Retry-After), in ms. */
  retryAfterMs?: number;
  /** A short reason for logs and metrics, e.g. `http 503` or `ECONNRESET`. */
  reason: string;
}

/** Classifies a response. 2xx/3xx and non-retryable 4xx are not failures for retry purposes. */
export function classifyResponse(
  response: { status: number; headers: { get(name: string): string | null } },
  now: number,
): Classification {
  const { status } = response;
  const retryable = isRetryableStatus(status);
  const retryAfterMs =
    retryable || status === 503 ? parseRetryAfter(response.headers.get('retry-after'), now) : undefined;
  return {
    retryable,
    unhealthy: isUnhealthyStatus(status),
    ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
    reason: `http ${status}`,
  };
}

/** undici codes beyond the shared list in `core/retryable.ts` that mean "the connection failed". */
const extraRetryableCodes: ReadonlySet<string> = new Set(['UND_ERR_CLOSED', 'ENOTCONN', 'ESOCKETTIMEDOUT']);

/**
 * Classifies a thrown error. Builds on `isRetryable` from the core (PostgreSQL 40001, 40P01,
 * 55P03, 57014, 57P01–03 and class 08; Node network codes; errors flagged `retryable`), and adds
 * what only an outgoing client meets: a per-attempt timeout (`TimeoutError`) is retryable, a
 * caller's abort (`AbortError`) is not, and a few more undici socket codes.
 */
export function classifyError(error: unknown): Classification {
  const name = (error as { name?: unknown } | null)?.name;
  if (name === 'AbortError') return { retryable: false, unhealthy: false, reason: 'aborted' };
  if (name === 'TimeoutError') return { retryable: true, unhealthy: true, reason: 'timeout' };
  const code = codeOf(error);
  if (isRetryable(error) || (code !== undefined && extraRetryableCodes.has(code))) {
    const retryAfterMs = (error as { retryAfterMs?: unknown }).retryAfterMs;
    return {
      retryable: true,
      unhealthy: true,
      ...(typeof retryAfterMs === 'number' ? { retryAfterMs } : {}),
      reason: code ?? (error as Error).name ?? 'error',
    };
  }
  return { retryable: false, unhealthy: false, reason: code ?? (name as string | undefined) ?? 'error' };
}

/**
 * True when a later attempt of the same intent may succeed. For saga steps and task handlers.
 *
 * @example
 * await claims.fail(task, error, { retryable: isRetryableFailure(error) });
 */
export function isRetryableFailure(error: unknown): boolean {
  return classifyError(error).retryable;
}

/** The first `code` string on the error or its cause chain (fetch wraps socket errors in `cause`). */
function codeOf(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}
