import { AsyncLocalStorage } from 'node:async_hooks';
import { deriveKey } from './keys.js';

/** The idempotency key of the operation or step that is running. */
interface KeyContext {
  key: string;
}

const storage = new AsyncLocalStorage<KeyContext>();

/**
 * Runs `fn` with `key` as the current idempotency key: the outgoing client attaches it to
 * every unsafe call made inside, without threading it through each function. The steps of
 * multi-step operations (`idem.steps`, and HTTP routes in steps mode), saga actions and
 * compensations, and `runActivity` run inside one automatically, with their derived key.
 *
 * @example
 * await withIdempotencyKey(message.id, () => payments.charge(order));
 */
export function withIdempotencyKey<T>(key: string, fn: () => T): T {
  return storage.run({ key }, fn);
}

/** The current idempotency key, if code runs inside `withIdempotencyKey`. */
export function currentIdempotencyKey(): string | undefined {
  return storage.getStore()?.key;
}

/**
 * The key of a named sub-call of the current step, for a step that makes several distinct
 * external calls (each needs its own key). Stable: it depends only on the step key and `name`.
 */
export function subKey(parent: string, name: string): string {
  return deriveKey({ tenant: 'idem', operation: 'sub-call', key: parent }, name);
}
