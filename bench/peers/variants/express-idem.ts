import { idempotency } from '../../../src/http/express.js';
import { createIdem } from '../../../src/operations/idem.js';
import { insertOrder, type OrderPayload } from '../business.js';
import { orderApp, serve } from '../http.js';
import type { Variant } from '../variant.js';

/** idem's own Express middleware (`idem/express`): the handler writes through `req.idem.tx`. */
export const expressIdem: Variant = {
  id: 'express-idem',
  label: 'idem over Express (idem/express)',
  layout: 'http',
  mechanism:
    'The Idempotency-Key contract of idem/express: the key is claimed in the transaction the handler writes through ' +
    '(req.idem.tx); the row, the key and the captured response commit together before the response is sent.',
  async start({ env, faults = {}, clientConnections }) {
    const engine = createIdem({
      sql: env.sql,
      schema: env.schema,
      ...(env.recording ? { recording: env.recording } : {}),
    });
    const idempotent = idempotency({ idem: engine, singleTenant: true, operation: 'create-order' });
    const app = orderApp((app) =>
      app.post('/orders', idempotent, async (req, res) => {
        await faults.beforeWrite?.();
        const order = await insertOrder(
          req.idem!.tx,
          env.schema,
          req.idem!.key,
          req.body as OrderPayload,
          faults.holdMs,
        );
        await faults.afterWrite?.();
        res.status(201).json(order);
      }),
    );
    return serve(app, clientConnections);
  },
};
