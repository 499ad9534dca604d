// The example of docs/guide/outbox.md. `npm run typecheck` compiles it, test/docs/guide-examples.test.ts
// checks the guide shows it as it is and runs it against PostgreSQL.
import type { Sql } from 'idem';
import { createOutboxDispatcher, createOutbox, type Publisher } from 'idem/outbox';

export function orderEvents(sql: Sql, schema = 'idem') {
  const outbox = createOutbox({ sql, schema });
  return {
    // The event commits with the business write, or neither does: never lost, never phantom.
    markPaid: (orderId: string) =>
      sql.transaction(async (tx) => {
        await tx.query("UPDATE orders SET state = 'paid' WHERE id = $1", [orderId]);
        await outbox.add(tx, { topic: 'orders', key: orderId, type: 'order.paid', payload: { orderId } });
      }),
    // createRabbitMqPublisher, createNatsPublisher, createInDatabasePublisher or createWebhookPublisher; at least once,
    // in order per key, with the event id as message id so consumers' inboxes drop repeats.
    async startDispatcher(publisher: Publisher) {
      const dispatcher = createOutboxDispatcher({ sql, schema, publisher, listen: process.env.DATABASE_URL });
      await dispatcher.start();
      return dispatcher; // dispatcher.stop() on shutdown
    },
  };
}
