import { IdemError } from '../core/errors.js';

/**
 * A publish did not succeed: the broker refused or did not confirm the message, the destination is
 * unreachable, or the publish timed out. `retryable` says whether the same event may succeed later.
 */
export class PublishError extends IdemError {
  constructor(message: string, options: { cause?: unknown; retryable?: boolean } = {}) {
    super('IDEM_PUBLISH_FAILED', message, { cause: options.cause, retryable: options.retryable ?? true });
  }
}

/**
 * True for a `PublishError`, from any copy of the package.
 *
 * @example
 * const results = await publisher.publish(events);
 * for (const r of results) if (!r.ok && isPublishError(r.error) && !r.error.retryable) alert(r.id);
 */
export const isPublishError = (error: unknown): error is PublishError =>
  typeof error === 'object' &&
  error !== null &&
  (error as { code?: unknown }).code === 'IDEM_PUBLISH_FAILED' &&
  (error as Record<symbol, unknown>)[Symbol.for('idem.error')] === true;

// Still public through `idem/outbox`; it lives in core, where the inbox's consumers import it too.
export { describeError } from '../core/describe-error.js';
