import { Idempotency } from '@node-idempotency/core';
import { RedisStorageAdapter } from '@node-idempotency/storage-adapter-redis';
import { createOrder } from '../business.js';
import { refused, succeeded, type Variant } from '../variant.js';

/**
 * `@node-idempotency/core` with `@node-idempotency/storage-adapter-redis`, used the way its README
 * shows: `onRequest` before the handler, `onResponse` with the body (or the error) after it.
 */
export const nodeIdempotency: Variant = {
  id: 'node-idempotency',
  label: '@node-idempotency (Redis)',
  layout: 'function',
  mechanism:
    'SET NX PX of an IN_PROGRESS record in Redis before the handler, SET of the COMPLETE record (body or error) after it; a ' +
    'duplicate that finds IN_PROGRESS is refused (REQUEST_IN_PROGRESS) until the record’s TTL (default 24 h) runs out, after ' +
    'which the next call runs the handler again. A failure is stored and replayed like a success. The record lives in Redis, ' +
    'outside the business transaction.',
  async start({ env, faults, inProgressMs }) {
    // The adapter opens its own Redis connection (it bundles node-redis 4).
    const storage = new RedisStorageAdapter({ url: env.redisUrl });
    await storage.connect();
    const idempotency = new Idempotency(storage, {
      cacheKeyPrefix: `${env.namespace}-node-idempotency`,
      enforceIdempotency: true,
      ...(inProgressMs !== undefined ? { cacheTTLMS: inProgressMs } : {}),
    });
    return {
      async call(key, payload) {
        const request = {
          method: 'POST',
          path: '/orders',
          headers: { 'idempotency-key': key },
          body: { ...payload },
        };
        try {
          const stored = await idempotency.onRequest(request);
          if (stored) return stored.error ? { ok: false, status: 'stored-error' } : succeeded('replayed');
        } catch (error) {
          return refused(error);
        }
        try {
          const order = await createOrder(env.sql, env.schema, key, payload, faults);
          await idempotency.onResponse(request, { body: order, additional: { status: 201 } });
          return succeeded('executed');
        } catch (error) {
          await idempotency.onResponse(request, {
            error: { message: (error as Error).message },
            additional: { status: 500 },
          });
          return refused(error);
        }
      },
      close: () => storage.disconnect(),
    };
  },
};
