// The current-key context lives in the core so multi-step operations can set it for their steps;
// the outgoing client reads it from here.
export { withIdempotencyKey, currentIdempotencyKey, subKey } from '../core/key-context.js';
