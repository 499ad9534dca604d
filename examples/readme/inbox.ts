// The example of docs/guide/inbox.md. `npm run typecheck` compiles it, test/docs/guide-examples.test.ts
// checks the guide shows it as it is and runs it against PostgreSQL.
import type { Sql } from 'idem';
import { createInbox } from 'idem/inbox';

export function billingConsumer(sql: Sql, schema = 'idem') {
  // Remember ids longer than any way a message can come back: redelivery, redrive, replay.
  const inbox = createInbox({ sql, schema, retentionMs: 30 * 86_400_000 });

  // Call it for every delivery (createRabbitMqConsumer and createJetStreamConsumer do), and ack after it resolves.
  return async (message: { id: string; orderId: string; amount: number }) => {
    const result = await inbox.handle({ consumer: 'billing', messageId: message.id }, async (tx, ctx) => {
      await tx.query('INSERT INTO invoices (order_id, amount, charge_key) VALUES ($1, $2, $3)', [
        message.orderId,
        message.amount,
        ctx.deriveKey('charge'), // the same on every redelivery: send it with downstream calls
      ]);
    });
    return result.duplicate ? 'duplicate' : 'processed'; // a duplicate ran nothing: ack it too
  };
}
