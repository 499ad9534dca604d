import type { BackoffOptions } from '../core/resilience/backoff.js';

/**
 * The backoff options of the client, `retry` and sagas: the core's one `BackoffOptions` shape.
 * Their default is `{ strategy: 'decorrelated', baseMs: 100, maxMs: 10000 }`.
 * @deprecated Use `BackoffOptions`.
 */
export type JitterOptions = BackoffOptions;

export { DecorrelatedJitter, inProcessBackoff } from '../core/resilience/in-process-backoff.js';
