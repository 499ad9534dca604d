/**
 * `start()`, whose synchronous throw becomes a rejection. For the hot paths written with promise
 * callbacks instead of async functions (one promise fewer per layer: see `observe` in
 * observability/events.ts), which must still reject rather than throw at their callers.
 */
export function promised<T>(start: () => Promise<T>): Promise<T> {
  try {
    return start();
  } catch (error) {
    return rejected(error);
  }
}

/** An async function: what turns the throw into a rejection. */
async function rejected(error: unknown): Promise<never> {
  throw error;
}

/** Whether `value` is a promise (a thenable) rather than a value given at once. */
export function isPromiseLike<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null | undefined)?.then === 'function';
}
