/**
 * `idempotency(options)`: one object that is both a Middy middleware (`before`, `after`,
 * `onError`) and a function wrapper (`.handler(fn)`), over the same invocation logic.
 *
 * Middy calls the handler between `before` and `after`, but idem must call it inside the key's
 * transaction. So `before` starts the invocation, which opens the transaction and, when it is the
 * handler's turn, lets `before` return; `after` hands the handler's response in and waits for the
 * commit; `onError` hands its error in and waits for the rollback. An invocation answered without
 * the handler (a replay, a problem) ends in `before` as Middy's early response.
 */
import { IdemError } from '../index.js';
import { LambdaInvocations } from './invocation.js';
import type { LambdaIdempotencyOptions } from './options.js';
import type {
  IdemLambdaContext,
  LambdaContext,
  LambdaHandler,
  MiddyMiddlewareLike,
  MiddyRequestLike,
} from './types.js';

/** The middleware and wrapper `idempotency` returns. */
export interface LambdaIdempotency<Client = unknown, Event = unknown> extends MiddyMiddlewareLike {
  /**
   * Wraps a handler: the function to export as the Lambda handler. The handler writes its business
   * rows through `context.idem.tx`.
   *
   * @example
   * export const handler = idempotent.handler(async (event: APIGatewayProxyEventV2, context) => {
   *   const { rows } = await context.idem!.tx.query('INSERT INTO orders (total) VALUES ($1) RETURNING id', [42]);
   *   return { statusCode: 201, body: JSON.stringify({ id: rows[0]!.id }) };
   * });
   */
  handler<E extends Event, R, C extends LambdaContext = LambdaContext>(
    fn: LambdaHandler<E, R, IdemLambdaContext<Client, C>>,
  ): LambdaHandler<E, R, C>;
}

/** What `before` left for `after` and `onError` of the same request. */
interface Pending {
  /** Settles the handler's promise inside the transaction. */
  respond(result: unknown): void;
  fail(error: unknown): void;
  outcome: Promise<unknown>;
}

/** Thrown when idem's transaction is retried after Middy's handler already ran (a serialization failure at COMMIT). */
class HandlerRanOnce extends IdemError {
  constructor() {
    super(
      'IDEM_OPERATION_FAILED',
      'the transaction failed after the handler ran, and Middy runs a handler once per invocation; nothing was stored: retry',
      { retryable: true },
    );
  }
}

/**
 * The Idempotency-Key contract and keyed events for AWS Lambda, as a Middy middleware
 * (`middy(handler).use(idempotent)`) and a function wrapper (`idempotent.handler(fn)`). Make it
 * once, outside the handler, with an `idem` whose pool is made outside the handler too. It starts
 * nothing: no timer, no connection until the first invocation.
 *
 * @example
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 1 });
 * const idem = createIdem({ sql: fromPg(pool, { prepare: false }) });
 * const idempotent = idempotency({ idem, singleTenant: true });
 * export const handler = middy(createOrder).use(idempotent);
 */
export function idempotency<Client = unknown, Event = unknown>(
  options: LambdaIdempotencyOptions<Client, Event>,
): LambdaIdempotency<Client, Event> {
  const invocations = new LambdaInvocations<Client, Event>(options);
  const pending = new WeakMap<object, Pending>();

  const before = async (request: MiddyRequestLike): Promise<unknown> => {
    let turn!: () => void;
    const handlerTurn = new Promise<void>((resolve) => (turn = resolve));
    let respond!: (result: unknown) => void;
    let fail!: (error: unknown) => void;
    const response = new Promise<unknown>((resolve, reject) => {
      respond = resolve;
      fail = reject;
    });
    let called = false;
    const outcome = invocations.invoke(request.event as Event, request.context, (idem) => {
      if (called) return Promise.reject(new HandlerRanOnce());
      called = true;
      if (idem) (request.context as IdemLambdaContext<Client>).idem = idem;
      turn();
      return response;
    });
    // Awaited by `after` or `onError`; never an unhandled rejection meanwhile.
    outcome.catch(() => {});
    const first = await Promise.race([
      handlerTurn.then(() => 'handler' as const),
      outcome.then(
        () => 'answered' as const,
        () => 'answered' as const,
      ),
    ]);
    if (first === 'answered') {
      const answer = await outcome;
      // Middy ends with this answer, without the handler; set as a property too, so that an
      // answer of `undefined` still counts as one.
      Object.assign(request, { earlyResponse: answer });
      return answer;
    }
    pending.set(request, { respond, fail, outcome });
    return undefined;
  };

  const after = async (request: MiddyRequestLike): Promise<void> => {
    const invocation = pending.get(request);
    if (!invocation) return;
    pending.delete(request);
    invocation.respond(request.response);
    request.response = await invocation.outcome;
  };

  const onError = async (request: MiddyRequestLike): Promise<unknown> => {
    const invocation = pending.get(request);
    if (!invocation) return undefined;
    pending.delete(request);
    invocation.fail(request.error);
    try {
      // A concurrent duplicate recorded the key while this handler failed: its answer stands.
      const answer = await invocation.outcome;
      request.response = answer;
      return answer;
    } catch {
      return undefined; // rolled back; Middy throws the handler's error on
    }
  };

  return {
    before,
    after,
    onError,
    handler<E extends Event, R, C extends LambdaContext = LambdaContext>(
      fn: LambdaHandler<E, R, IdemLambdaContext<Client, C>>,
    ): LambdaHandler<E, R, C> {
      return (event, context) =>
        invocations.invoke(event, context, (idem) => {
          const withIdem = context as IdemLambdaContext<Client, C>;
          if (idem) withIdem.idem = idem;
          return fn(event, withIdem);
        }) as Promise<R>;
    },
  };
}
