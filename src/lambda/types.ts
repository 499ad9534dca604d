/**
 * The parts of AWS Lambda's and Middy's objects idem reads, declared structurally: `idem/lambda`
 * needs neither `@types/aws-lambda` nor `@middy/core` (not at run time, not in its declarations).
 * The types of `aws-lambda` (`Context`, `APIGatewayProxyEventV2`, `SQSEvent`, …) and Middy's
 * `Request` fit them.
 */
import type { IdempotencyContext } from '../http/index.js';

/** The Lambda invocation context, as far as idem reads it (`aws-lambda`'s `Context` fits). */
export interface LambdaContext {
  /** The function's name: the default operation of events with no route pattern. */
  readonly functionName: string;
  /** Milliseconds before the invocation times out: bounds idem's waits. */
  getRemainingTimeInMillis(): number;
}

/** The Lambda context a handler behind `idempotency` receives: `context.idem` is set. */
export type IdemLambdaContext<Client = unknown, C extends LambdaContext = LambdaContext> = C & {
  /**
   * The idempotency context: `tx` (write business rows through it: they commit with the key and
   * the stored result), `key`, `tenant`, `operation`, `deriveKey(name)`, `setResource(…)`. Unset
   * when the invocation runs without idempotency: an HTTP method outside `methods`, or no key
   * with `required: false`.
   */
  idem?: IdempotencyContext<Client>;
};

/** What the option callbacks receive: the invocation's event and context. */
export interface LambdaRequest<Event = unknown> {
  event: Event;
  context: LambdaContext;
}

/** A Lambda handler as idem wraps it: `async (event, context) => result`. */
export type LambdaHandler<Event, Result, C extends LambdaContext = LambdaContext> = (
  event: Event,
  context: C,
) => Promise<Result>;

/** Middy's request object, as far as the middleware reads and writes it (Middy 5–7). */
export interface MiddyRequestLike {
  event: unknown;
  context: LambdaContext;
  response: unknown;
  error: unknown;
  internal?: unknown;
}

/**
 * A Middy middleware: `middy(handler).use(middleware)`. Its `onError` is the hook Middy calls,
 * named by Middy, which idem provides: not a callback an application hands to idem (idem reports
 * through `events`), hence a type rather than an interface of options.
 */
export type MiddyMiddlewareLike = {
  before: (request: MiddyRequestLike) => Promise<unknown>;
  after: (request: MiddyRequestLike) => Promise<void>;
  onError: (request: MiddyRequestLike) => Promise<unknown>;
};

/** One SQS message of an `SQSEvent` (`aws-lambda`'s `SQSRecord` fits). */
export interface SqsRecord {
  messageId: string;
  body: string;
  /** Holds `MessageGroupId` on a FIFO queue. */
  attributes?: { MessageGroupId?: string | undefined; ApproximateReceiveCount?: string };
  messageAttributes?: Record<string, { stringValue?: string | undefined; dataType?: string }>;
  eventSource?: string;
  /** The queue's ARN; a FIFO queue's ends in `.fifo`. */
  eventSourceARN?: string;
}

/** The event of an SQS event source mapping. */
export interface SqsEvent<Record extends SqsRecord = SqsRecord> {
  Records: Record[];
}

/**
 * The partial batch response: the messages to redeliver. The event source mapping must have
 * `ReportBatchItemFailures` in its `FunctionResponseTypes`, or SQS ignores it.
 */
export interface SqsBatchResponse {
  batchItemFailures: { itemIdentifier: string }[];
}
