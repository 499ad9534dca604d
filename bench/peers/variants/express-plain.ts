import { createOrder, type OrderPayload } from '../business.js';
import { orderApp, requestKey, serve } from '../http.js';
import type { Variant } from '../variant.js';

/** The plain handler behind an Express route: the HTTP baseline. */
export const expressPlain: Variant = {
  id: 'express-plain',
  label: 'plain handler over Express',
  layout: 'http',
  mechanism: 'No dedupe: every request runs the transaction.',
  async start({ env, faults, clientConnections }) {
    const app = orderApp((app) =>
      app.post('/orders', async (req, res) => {
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
          res.status(500).json({ error: (error as Error).message });
        }
      }),
    );
    return serve(app, clientConnections);
  },
};
