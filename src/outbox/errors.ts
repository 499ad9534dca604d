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

/** A short, single-line description of an error for `last_error` columns and headers. */
export function describeError(error: unknown, max = 1000): string {
  let text: string;
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    text = `${error.name}${typeof code === 'string' ? ` ${code}` : ''}: ${error.message}`;
  } else {
    text = String(error);
  }
  text = text.replace(/\s+/g, ' ').trim();
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
