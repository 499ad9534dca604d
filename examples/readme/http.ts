// The HTTP example of docs/guide/http.md (Express; Fastify, Hono and node:http work alike). `npm run
// typecheck` compiles it, test/docs/guide-examples.test.ts checks the guide shows it as it is and runs it.
import express from 'express';
import type { Idem } from 'idem';
import { idempotency } from 'idem/express';

export function ordersApp(idem: Idem) {
  const app = express();
  // The tenant scopes keys: the authenticated account — here a header your gateway sets after
  // authenticating the caller and strips from client requests; never a value a client chooses.
  const idempotent = idempotency({ idem, tenant: (req) => req.get('x-account') });

  app.post('/orders', idempotent, async (req, res) => {
    const { amount } = req.body as { amount: number };
    // Written through the key's own transaction: the row, the key and the stored response
    // commit together, and only then is the response sent.
    const { rows } = await req.idem!.tx.query<{ id: string }>(
      'INSERT INTO orders (amount) VALUES ($1) RETURNING id',
      [amount],
    );
    res.status(201).location(`/orders/${rows[0]!.id}`).json({ id: rows[0]!.id });
  });
  return app;
}
