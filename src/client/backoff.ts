export { DecorrelatedJitter, inProcessBackoff } from '../core/resilience/in-process-backoff.js';
