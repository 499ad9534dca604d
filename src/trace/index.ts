/** Intents' timelines (`createTrace`), exported from `idem`. */
export { createTrace, type Trace, type TraceOptions } from './trace.js';
export type * from './types.js';
