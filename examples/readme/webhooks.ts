// The example of docs/guide/webhooks.md. `npm run typecheck` compiles it,
// test/docs/guide-examples.test.ts checks the guide shows it as it is and runs it against PostgreSQL.
import type { Express } from 'express';
import { createEvents, type Sql } from 'idem';
import { webhooks } from 'idem/express';
import * as hooks from 'idem/webhooks';

const paid = (e: hooks.WebhookEvent) => e.json<{ data: { invoice: string; version: number } }>().data;
const handlers: hooks.WebhookHandlers = {
  billing: {
    'invoice.paid': {
      // Carries the invoice's state: the newest version wins; an older one is superseded, never applied.
      // (Events that carry a change use ordering: 'sequence': every version, in order.)
      ordering: 'state',
      entity: (e) => ({ key: paid(e).invoice, version: paid(e).version }),
      handle: async (tx, e) => {
        await tx.query("UPDATE invoices SET state = 'paid' WHERE id = $1", [paid(e).invoice]);
      },
    },
  },
};

export async function billingWebhooks(app: Express, sql: Sql, secret: string, schema = 'idem') {
  // In: verify first, store once per (source, webhook-id), answer 202 at once; workers apply it.
  const events = createEvents(); // one channel for every module of the app
  const processor = hooks.createWebhookProcessor({ sql, schema, handlers, events });
  const receiver = hooks.createWebhookReceiver({
    sql,
    schema,
    events,
    sources: { billing: hooks.createStandardWebhooksVerifier({ secrets: [secret] }) },
  });
  events.on('webhook:received', (e) => e.duplicate || processor.notify()); // apply it now, not at the next poll
  app.post('/webhooks/billing', webhooks({ receiver, source: 'billing' })); // before express.json()
  await processor.start();

  // Out: outbox events to subscribers, signed, with the same webhook-id and bytes on every retry.
  const sender = hooks.createWebhookSender({ sql, schema });
  await sender.start();
  return { processor, sender, publisher: hooks.createWebhookPublisher({ sender }) }; // a Publisher for createOutboxDispatcher
}
