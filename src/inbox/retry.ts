import { IdemError, InvalidArgumentError, isIdemError } from '../core/errors.js';
import { createBackoff } from '../core/resilience/backoff.js';

/** Retry settings shared by the broker consumers. */
export interface ConsumerRetryOptions {
  /** Deliveries before a message is dead-lettered (the first delivery counts). Default 5. */
  maxAttempts?: number;
  /**
   * Delay before redelivery after the n-th failed delivery (the last value repeats): the core
   * backoff's `schedule` strategy, without jitter. A list rather than a `backoff` curve because
   * RabbitMQ redelivers through one delay queue per distinct delay, so the delays must be few and
   * known in advance. Default [1000, 10000, 60000, 300000] ms.
   */
  retryDelaysMs?: readonly number[];
  /**
   * Whether a handler's error may succeed on a redelivery. Default: unless the error says
   * `retryable: false` (idem's own errors do), so a bug is retried and then dead-lettered.
   */
  retryable?: (error: unknown) => boolean;
  /** Record dead messages in the inbox (state `dead`, with payload and error). Default true. */
  recordDead?: boolean;
}

export const defaultRetryDelaysMs: readonly number[] = [1000, 10_000, 60_000, 300_000];

export interface ResolvedRetry {
  maxAttempts: number;
  retryDelaysMs: readonly number[];
  retryable: (error: unknown) => boolean;
  recordDead: boolean;
  delayFor(failedAttempts: number): number;
}

export function resolveRetry(options: ConsumerRetryOptions): ResolvedRetry {
  const maxAttempts = options.maxAttempts ?? 5;
  const retryDelaysMs = options.retryDelaysMs ?? defaultRetryDelaysMs;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1)
    throw new InvalidArgumentError('maxAttempts must be >= 1');
  if (retryDelaysMs.length === 0 || retryDelaysMs.some((d) => !Number.isInteger(d) || d < 0)) {
    throw new InvalidArgumentError('retryDelaysMs must be non-empty whole milliseconds');
  }
  // The core's schedule strategy, without jitter: the broker redelivers at these exact delays.
  const delayFor = createBackoff({ strategy: 'schedule', delaysMs: retryDelaysMs, jitter: 'none' }, {});
  return {
    maxAttempts,
    retryDelaysMs,
    retryable:
      options.retryable ?? ((error) => (error as { retryable?: unknown } | null)?.retryable !== false),
    recordDead: options.recordDead ?? true,
    delayFor,
  };
}

/**
 * True for a `MessageWithoutIdError`, from any copy of the package.
 *
 * @example
 * if (isMessageWithoutId(error)) log.warn('a producer sends messages without an id');
 */
export const isMessageWithoutId = (e: unknown): e is MessageWithoutIdError =>
  isIdemError(e) && e.code === 'IDEM_MESSAGE_INVALID';

/** A message without an id cannot be deduplicated, so it is dead-lettered rather than processed. */
export class MessageWithoutIdError extends IdemError {
  constructor(where: string) {
    super('IDEM_MESSAGE_INVALID', `message from ${where} has no id; it cannot be deduplicated`, {
      cause: undefined,
      retryable: false,
    });
  }
}
