/**
 * idem/http: the Idempotency-Key contract over HTTP, independent of any framework. The
 * integrations `idem/express`, `idem/fastify`, `idem/hono` and `idem/node-http` are thin layers
 * over `HttpIdempotency`; use it directly to integrate another framework.
 *
 * See docs/guide/http.md for the contract: the table of cases, every problem type, options and defaults.
 */
export {
  createHttpIdempotency,
  type HttpIdempotency,
  type Admission,
  type Answer,
  type RequestView,
  type Respond,
  type Scoped,
  type Ticket,
} from './engine.js';
export type { IdempotencyContext } from './context.js';
export {
  defaultStore,
  defaultMaxBodyBytes,
  singleTenantId,
  type CapturedResponse,
  type IdempotencyOptions,
  type RouteInfo,
  type StoreDecision,
} from './options.js';
export { parseIdempotencyKey, type KeyHeaderResult } from './key-header.js';
export {
  problemKinds,
  problemResponse,
  defaultProblemTypeBase,
  type ProblemDocument,
  type ProblemKind,
} from './problem.js';
export { defaultReplayHeaders, neverReplayed, replayedHeader } from './response-headers.js';
export { requestFingerprint, type FingerprintInput } from './request-fingerprint.js';
export {
  BodyMalformedError,
  BodyTooLargeError,
  isBodyMalformed,
  isBodyTooLarge,
  parseBody,
  readNodeBody,
  readWebBody,
} from './request-body.js';
export { restoreResponse, type StoredResponseMeta } from './stored-response.js';
export { httpAnswer, type HttpAnswerOptions } from './answer.js';
