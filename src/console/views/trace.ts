/**
 * An intent's timeline (`createTrace`, docs/trace.md), by the intent's names or by a reverse
 * lookup: a message id (an outbox event's, or one an inbox record keeps), a derived key, or a
 * webhook delivery id (received from `source`, or sent). Read with the trace's own statements in
 * the console's read-only transaction.
 */
import { createTrace, type Timeline } from '../../trace/index.js';
import type { Queryable, QueryOptions, Row } from '../../core/sql.js';
import type { ConsoleDatabase } from '../database.js';
import { InvalidParameterError, optionalName, requiredName, type Query } from '../params.js';

/**
 * The parameters of `api/trace`: the intent's names, or `message` (with `tenant` optional), or
 * `derivedKey`, or `delivery` (with `source` and `tenant` optional).
 */
export const traceParameters = [
  'tenant',
  'operation',
  'key',
  'message',
  'derivedKey',
  'delivery',
  'source',
] as const;

/** The timeline the query names, or null when no record names it. */
export async function readTrace(db: ConsoleDatabase, query: Query): Promise<Timeline | null> {
  const message = optionalName(query, 'message');
  const derivedKey = optionalName(query, 'derivedKey');
  const delivery = optionalName(query, 'delivery');
  const source = optionalName(query, 'source');
  const tenant = optionalName(query, 'tenant');
  const operation = optionalName(query, 'operation');
  const key = optionalName(query, 'key');
  const given = [message, derivedKey, delivery, operation ?? key].filter((v) => v !== undefined).length;
  if (given !== 1) {
    throw new InvalidParameterError(
      message !== undefined
        ? 'message'
        : derivedKey !== undefined
          ? 'derivedKey'
          : delivery !== undefined
            ? 'delivery'
            : 'operation',
      'or derivedKey, or delivery, or tenant, operation and key: give exactly one way to name the intent',
    );
  }
  if (derivedKey !== undefined && tenant !== undefined) {
    throw new InvalidParameterError('tenant', 'is not taken with derivedKey');
  }
  // A source names where a delivery was received: it means nothing beside another lookup.
  if (source !== undefined && delivery === undefined) {
    throw new InvalidParameterError('source', 'is only taken with delivery');
  }
  // Every parameter is checked before a transaction starts.
  const intent =
    message === undefined && derivedKey === undefined && delivery === undefined
      ? {
          tenant: requiredName(query, 'tenant'),
          operation: requiredName(query, 'operation'),
          key: requiredName(query, 'key'),
        }
      : undefined;
  return db.read((tx) => {
    const trace = createTrace({ sql: oneAtATime(tx), schema: db.schema });
    if (intent) return trace.intent(intent);
    if (message !== undefined) return trace.message(message, { tenant });
    if (delivery !== undefined) return trace.delivery(delivery, { source, tenant });
    return trace.derivedKey(derivedKey!);
  });
}

/**
 * `tx`, sending one statement at a time: the trace reads its tables concurrently, which on a pool
 * spreads over connections, but the console's transaction is one connection (node-postgres
 * deprecates queuing on a busy client).
 */
function oneAtATime(tx: Queryable): Queryable {
  let last: Promise<unknown> = Promise.resolve();
  return {
    query: <R extends Row>(text: string, params?: readonly unknown[], options?: QueryOptions) => {
      const run = last.then(() => tx.query<R>(text, params, options));
      last = run.catch(() => undefined);
      return run;
    },
  };
}
