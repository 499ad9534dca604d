/**
 * What `idem/lambda` throws for an event it cannot make idempotent. HTTP events are answered with
 * problem documents instead (400 `key-missing`, `tenant-missing`, …), as by every HTTP
 * integration; these are for the other events, whose caller (an SQS mapping, EventBridge, a
 * Step Functions task, `Invoke`) sees the thrown error. Both carry the codes of
 * `idemErrorCodes`, and neither is retryable: the same event fails the same way.
 */
import { IdemError, isIdemError } from '../index.js';

/**
 * The event has no idempotency key where `key` says it is (or, with no `key` option, it is not
 * an HTTP event, whose key would be its `Idempotency-Key` header), and `required` is true.
 * Nothing ran. Powertools' `IdempotencyKeyError` (`throwOnNoIdempotencyKey: true`).
 */
export class KeyMissingError extends IdemError {
  constructor(detail: string) {
    super('IDEM_KEY_MISSING', detail, { retryable: false });
  }
}

/**
 * True for a `KeyMissingError`, from any copy of the package.
 *
 * @example
 * try {
 *   return await handler(event, context);
 * } catch (error) {
 *   if (isKeyMissing(error)) return { status: 'rejected', reason: error.message };
 *   throw error;
 * }
 */
export const isKeyMissing = (e: unknown): e is KeyMissingError =>
  isIdemError(e) && e.code === 'IDEM_KEY_MISSING';

/** The `tenant` resolver named no tenant for this event. Nothing ran. */
export class TenantMissingError extends IdemError {
  constructor(detail: string) {
    super('IDEM_TENANT_MISSING', detail, { retryable: false });
  }
}

/**
 * True for a `TenantMissingError`, from any copy of the package.
 *
 * @example
 * if (isTenantMissing(error)) log.warn({ event }, 'an event without an account');
 */
export const isTenantMissing = (e: unknown): e is TenantMissingError =>
  isIdemError(e) && e.code === 'IDEM_TENANT_MISSING';
