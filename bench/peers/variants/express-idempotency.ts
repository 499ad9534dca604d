import { IdempotencyService } from 'express-idempotency';
import { createOrder, type OrderPayload } from '../business.js';
import { orderApp, requestKey, serve } from '../http.js';
import type { Variant } from '../variant.js';

/**
 * `express-idempotency` with its only bundled data adapter (in memory; its README points to a
 * separate MongoDB adapter for production). The route checks `isHit` and calls `reportError` on
 * failure, as its README asks.
 */
export const expressIdempotency: Variant = {
  id: 'express-idempotency',
  label: 'express-idempotency (in memory)',
  layout: 'http',
  mechanism:
    'Looks the key up in its data adapter, then creates the record if absent (check-then-act across two adapter calls); ' +
    'a duplicate that finds a record without a response gets 409. The response is stored when res.send runs; ' +
    'reportError deletes the record. The default adapter is the process’s memory: one instance never sees another’s keys, ' +
    'and a restart forgets them all.',
  async start({ env, faults, clientConnections }) {
    // One service per app instance (the package's `idempotency()` keeps a module-wide singleton).
    const service = new IdempotencyService();
    const app = orderApp((app) =>
      app.post(
        '/orders',
        (req, res, next) => service.provideMiddlewareFunction(req, res, next),
        async (req, res) => {
          if (service.isHit(req)) return; // the middleware already answered from its store
          try {
            const order = await createOrder(
              env.sql,
              env.schema,
              requestKey(req.headers['idempotency-key']),
              req.body as OrderPayload,
              faults,
            );
            res.status(201).json(order);
          } catch (error) {
            await service.reportError(req);
            res.status(500).json({ error: (error as Error).message });
          }
        },
      ),
    );
    return serve(app, clientConnections);
  },
};
