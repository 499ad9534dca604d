import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { CachePersistenceLayer } from '@aws-lambda-powertools/idempotency/cache';
import { createOrder, type OrderPayload, type OrderResult } from '../business.js';
import { refused, succeeded, type Variant } from '../variant.js';

/** The event the wrapped function receives: the client's key beside the request. */
interface OrderEvent extends OrderPayload {
  key: string;
}

/**
 * The part of a Lambda context Powertools reads: the remaining time bounds how long its in-progress
 * record blocks duplicates (an unfinished record older than that is an orphan another call takes over).
 */
interface FakeLambdaContext {
  functionName: string;
  awsRequestId: string;
  getRemainingTimeInMillis(): number;
}

/** Lambda's default timeout is 3 s; 30 s is a common API handler setting. */
const defaultRemainingMs = 30_000;

/**
 * `@aws-lambda-powertools/idempotency` with its Redis/Valkey persistence layer (2.x names it
 * `CachePersistenceLayer`, subpath `/cache`), wrapped around the plain handler with
 * `makeIdempotent` and a fake Lambda context, as a Lambda handler would be.
 */
export const powertools: Variant = {
  id: 'powertools',
  label: 'Powertools idempotency (Redis)',
  layout: 'function',
  mechanism:
    'SET NX of an INPROGRESS record in Redis before the handler, SET of the COMPLETED record after it; a duplicate that finds ' +
    'INPROGRESS is refused (IdempotencyAlreadyInProgressError) until the Lambda’s remaining time has passed, after which the ' +
    'record is an orphan and the next call runs the handler again. On a handler error the record is deleted. The record lives ' +
    'in Redis, outside the business transaction. Payload validation is off (its default): turned on, every replay failed ' +
    'with IdempotencyValidationError, as the COMPLETED record of the Redis layer drops the payload hash (2.35.0).',
  async start({ env, faults, inProgressMs }) {
    const persistenceStore = new CachePersistenceLayer({ client: env.redis });
    const config = new IdempotencyConfig({
      eventKeyJmesPath: 'key',
      // Payload validation (refusing the same key with another payload, which idem always does) is
      // left off, its default: with `payloadValidationJmesPath: '[amount, currency]'` every replay
      // answered IdempotencyValidationError, because this layer's COMPLETED record (2.35.0,
      // `_updateRecord`) does not keep the payload hash its INPROGRESS record had.
      throwOnNoIdempotencyKey: true,
    });
    const context: FakeLambdaContext = {
      functionName: 'create-order',
      awsRequestId: 'bench',
      getRemainingTimeInMillis: () => inProgressMs ?? defaultRemainingMs,
    };
    const handler = makeIdempotent(
      async (event: OrderEvent, _context: FakeLambdaContext): Promise<OrderResult> =>
        createOrder(
          env.sql,
          env.schema,
          event.key,
          { amount: event.amount, currency: event.currency },
          faults,
        ),
      { persistenceStore, config, keyPrefix: `${env.namespace}-powertools` },
    );
    return {
      async call(key, payload) {
        try {
          await handler({ key, ...payload }, context);
          return succeeded();
        } catch (error) {
          return refused(error);
        }
      },
      async close() {},
    };
  },
};
