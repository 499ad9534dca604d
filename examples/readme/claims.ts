// The claims example of docs/guide/claims.md. `npm run typecheck` compiles it,
// test/docs/guide-examples.test.ts checks the guide shows it as it is and runs it against PostgreSQL.
import type { Queryable, Sql } from 'idem';
import { createClaims } from 'idem/claims';

export function receiptQueue(sql: Sql, schema = 'idem') {
  const claims = createClaims({ sql, schema, leaseMs: 30_000 });
  return {
    // In the order's transaction: the task exists iff the order does, once per key.
    enqueue: (tx: Queryable, orderId: string) =>
      claims.enqueueIn(tx, {
        tenant: 'acme',
        queue: 'receipts',
        key: `receipt:${orderId}`,
        payload: { orderId },
      }),

    async workOnce(send: (orderId: string, key: string) => Promise<void>) {
      for (const task of await claims.claim<{ orderId: string }>('receipts', { limit: 10 })) {
        const outcome = await claims.run(task, async (tx) => {
          await send(task.payload.orderId, task.downstreamKey); // the same for every worker and attempt
          await tx.query('UPDATE orders SET receipt_sent = true WHERE id = $1', [task.payload.orderId]);
        }); // fence check, the writes and the completion: one commit
        if (outcome.state !== 'completed') console.warn(`receipt ${task.id}: ${outcome.state}`);
      }
    },
  };
}
