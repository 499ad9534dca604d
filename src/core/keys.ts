import { createHash } from 'node:crypto';
import { InvalidArgumentError, InvalidKeyError, type OperationScope } from './errors.js';

/** Keys are printable ASCII without spaces (0x21–0x7E), like Stripe's and the IETF draft's examples. */
const printableAscii = /^[\x21-\x7e]+$/;
export const maxKeyLength = 255;

/** Throws `InvalidKeyError` unless `key` is 1–255 printable ASCII characters and at least `minLength`. */
export function validateKey(key: unknown, minLength = 1): asserts key is string {
  if (typeof key !== 'string' || key.length === 0) throw new InvalidKeyError('idempotency key is missing');
  if (key.length > maxKeyLength)
    throw new InvalidKeyError(`idempotency key is longer than ${maxKeyLength} characters`);
  if (key.length < minLength)
    throw new InvalidKeyError(`idempotency key is shorter than ${minLength} characters`);
  if (!printableAscii.test(key))
    throw new InvalidKeyError('idempotency key must be printable ASCII without spaces');
}

/** Tenant and operation names: 1–200 characters, no control characters. */
// eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
const controlCharacter = /[\x00-\x1f\x7f]/;

export function validateName(what: string, value: unknown): asserts value is string {
  if (typeof value !== 'string' || value.length === 0 || value.length > 200 || controlCharacter.test(value)) {
    throw new InvalidArgumentError(`${what} must be 1–200 characters without control characters`);
  }
}

/**
 * The key a step sends downstream. It depends only on the intent and the step's name, so it is the
 * same on every retry, crash and takeover, and differs for every step and every intent.
 * Shape: `idem_` + 43 base64url characters (SHA-256), well inside common 255-character limits.
 */
export function deriveKey(scope: OperationScope, ...path: string[]): string {
  const hash = createHash('sha256');
  for (const part of [scope.tenant, scope.operation, scope.key, ...path]) {
    hash.update(String(part.length)).update(':').update(part);
  }
  return 'idem_' + hash.digest('base64url');
}
