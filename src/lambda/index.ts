/**
 * idem/lambda: AWS Lambda handlers made idempotent on PostgreSQL. The Idempotency-Key contract of
 * `idem/http` for API Gateway (REST and HTTP APIs), ALB and function URL events, and keyed
 * operations for any other event, as a Middy middleware and a function wrapper; SQS batches on the
 * inbox with partial batch responses. Nothing needs `@middy/core` or `@types/aws-lambda` at run time.
 *
 * See docs/lambda.md, which maps Powertools' idempotency options to these.
 */
export { idempotency, type LambdaIdempotency } from './middleware.js';
export type { EventSelector, LambdaIdempotencyOptions } from './options.js';
export {
  createSqsBatchHandler,
  type SqsBatchHandler,
  type SqsBatchOptions,
  type SqsMessageContext,
} from './sqs.js';
export { KeyMissingError, TenantMissingError, isKeyMissing, isTenantMissing } from './errors.js';
export type {
  IdemLambdaContext,
  LambdaContext,
  LambdaHandler,
  LambdaRequest,
  MiddyMiddlewareLike,
  MiddyRequestLike,
  SqsBatchResponse,
  SqsEvent,
  SqsRecord,
} from './types.js';
