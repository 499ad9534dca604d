import { InvalidArgumentError } from '../index.js';
import type { IdempotencyOptions, RouteInfo } from '../http/index.js';
import { compilePath, type PathEvaluator } from './path.js';
import type { LambdaContext, LambdaRequest } from './types.js';

/**
 * Chooses a value from the event: a path (the JMESPath subset of `path.ts`, e.g. `'body'`,
 * `'headers."idempotency-key"'`, `'powertools_json(body).orderId'`), or a function.
 */
export type EventSelector<Event = unknown> = string | ((event: Event, context: LambdaContext) => unknown);

/**
 * Options of `idempotency`: those of every HTTP integration (`idem/http`'s `IdempotencyOptions`,
 * whose callbacks receive `{ event, context }`), for the HTTP events, plus what Lambda adds.
 */
export interface LambdaIdempotencyOptions<Client = unknown, Event = unknown> extends Omit<
  IdempotencyOptions<LambdaRequest<Event>, Client>,
  'operation' | 'mode' | 'required' | 'methods'
> {
  /**
   * Where the key is. Default: for an HTTP event (API Gateway REST or HTTP API, ALB, function
   * URL), its `Idempotency-Key` header (`keyHeader`), parsed as every HTTP integration parses it;
   * any other event has no default, so give one (Powertools' `eventKeyJmesPath`). A path or a
   * function of the event; a string that is a valid key (1–255 printable ASCII) is the key as it
   * is, anything else (an object, a list such as `powertools_json(body).["user", "productId"]`, a
   * number, a longer string) is keyed by the SHA-256 of its canonical JSON, as Powertools hashes
   * its selection. `null`, `''`, and a list or object of nothing but empty values are no key.
   */
  key?: EventSelector<Event>;
  /**
   * What must be the same every time the key is used (Powertools' `payloadValidationJmesPath`): a
   * path or a function of the event, fingerprinted; another value under a used key is refused (HTTP
   * events: 422 `key-reused`; others: `KeyReusedError`). Default: for an HTTP event, its method,
   * route, path, query and body (`fingerprint` narrows that); for an SQS event, each record's
   * `messageId`, `body` and `messageAttributes` (not its receipt handle or receive count, which
   * change on every delivery); for any other event, the whole event. `() => null` turns the check
   * off, as Powertools' default is.
   */
  payload?: EventSelector<Event>;
  /**
   * Whether an event without a key is refused. Default true: an HTTP event is answered 400
   * `key-missing`, another event throws `KeyMissingError`. When false it runs the handler without
   * idempotency (`context.idem` unset), as Powertools does with `throwOnNoIdempotencyKey: false`.
   */
  required?: boolean;
  /**
   * The operation keys are scoped by. Default: for an HTTP event with a route pattern (a REST
   * API's `resource`, an HTTP API's `routeKey`), method and pattern, e.g. `POST /orders/{id}`;
   * for ALB, function URLs and the `$default` route, the method and the function's name
   * (`POST create-order`); for any other event, the function's name (`context.functionName`), as
   * Powertools prefixes its keys with it. Keys never cross operations.
   */
  operation?: string | ((request: LambdaRequest<Event>, route: RouteInfo | undefined) => string);
  /**
   * HTTP methods the contract covers; an HTTP event with another method runs the handler without
   * idempotency. Default `['POST', 'PATCH']`. Events that are not HTTP are always covered.
   */
  methods?: readonly string[];
  /**
   * Time kept back from the invocation's deadline, in ms. A wait for a concurrent execution of
   * the same key ends `reserveMs` before `context.getRemainingTimeInMillis()` runs out (409
   * `in-progress` or `InProgressError`, retryable), so the function answers instead of timing
   * out. Default 500.
   */
  reserveMs?: number;
  /**
   * Whether the business transaction is bounded by the invocation's deadline. When true, and the
   * context has `getRemainingTimeInMillis`, the transaction opens with
   * `statement_timeout` set to the remaining time less `reserveMs`, and
   * `idle_in_transaction_session_timeout` to the remaining time (both `SET LOCAL`: they end with
   * the transaction, so a pooled or PgBouncer connection is handed back unchanged). A statement
   * stuck behind a lock then fails while the function can still answer (its writes roll back, the
   * key stays free for a retry), and a container that stops mid-transaction releases the key's
   * lock when its deadline passes instead of when TCP keepalive notices the dead peer (hours by
   * default). It costs one round trip per invocation. Default true.
   */
  boundByDeadline?: boolean;
  /**
   * Shapes what a replay returns (Powertools' `responseHook`): called with the stored result (for
   * an HTTP event, the result object, `Idempotent-Replayed: true` already in its headers) and the
   * request; its return value is returned. Default: the stored result as it is.
   */
  mapReplay?: (result: unknown, request: LambdaRequest<Event>) => unknown;
}

/** The options read once, when the middleware is made. */
export interface LambdaSettings<Client, Event> {
  key: PathEvaluator | ((event: unknown, context: LambdaContext) => unknown) | undefined;
  payload: PathEvaluator | ((event: unknown, context: LambdaContext) => unknown) | undefined;
  required: boolean;
  operation: LambdaIdempotencyOptions<Client, Event>['operation'];
  reserveMs: number;
  boundByDeadline: boolean;
  mapReplay: LambdaIdempotencyOptions<Client, Event>['mapReplay'];
}

export const defaultReserveMs = 500;

export function lambdaSettings<Client, Event>(
  options: LambdaIdempotencyOptions<Client, Event>,
): LambdaSettings<Client, Event> {
  const reserveMs = options.reserveMs ?? defaultReserveMs;
  if (!(Number.isFinite(reserveMs) && reserveMs >= 0)) {
    throw new InvalidArgumentError('reserveMs must be zero or more');
  }
  if (options.mapReplay !== undefined && typeof options.mapReplay !== 'function') {
    throw new InvalidArgumentError('mapReplay must be a function');
  }
  if (options.boundByDeadline !== undefined && typeof options.boundByDeadline !== 'boolean') {
    throw new InvalidArgumentError('boundByDeadline must be true or false');
  }
  return {
    key: selector('key', options.key),
    payload: selector('payload', options.payload),
    required: options.required ?? true,
    operation: options.operation,
    reserveMs,
    boundByDeadline: options.boundByDeadline ?? true,
    mapReplay: options.mapReplay,
  };
}

function selector<Event>(
  what: string,
  value: EventSelector<Event> | undefined,
): ((event: unknown, context: LambdaContext) => unknown) | undefined {
  if (value === undefined) return undefined;
  if (typeof value === 'function') return value as (event: unknown, context: LambdaContext) => unknown;
  if (typeof value === 'string') return compilePath(value, what);
  throw new InvalidArgumentError(`${what} must be a path (a string) or a function of the event`);
}
