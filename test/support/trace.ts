/**
 * What the trace suites start from: a schema, and idem's parts on it sharing one clock moved by
 * hand, so each phase of a scenario has its own instant and a timeline's time order is its causal
 * order.
 */
import { createIdem } from 'idem';
import { createClaims } from 'idem/claims';
import { createInbox } from 'idem/inbox';
import { createOutbox } from 'idem/outbox';
import { fromPg } from 'idem/pg';
import { createManualClock } from 'idem/testing';
import {
  createStandardWebhooksVerifier,
  createWebhookProcessor,
  createWebhookReceiver,
  createWebhookSender,
  type WebhookHandlers,
  type WebhookSenderOptions,
} from 'idem/webhooks';
import { startServer } from '../webhooks/support.js';
import { createTestSchema } from './database.js';

/** The schema (`db`), its `sql`, the hand-moved `clock`, and idem, the outbox, inbox and claims on them. */
export async function createTraceBed(poolSize = 6) {
  const db = await createTestSchema({ poolSize });
  const sql = fromPg(db.pool);
  const { schema } = db;
  const clock = createManualClock({ startMs: Date.parse('2030-01-01T00:00:00Z') });
  return {
    db,
    sql,
    schema,
    clock,
    idem: createIdem({ sql, schema, clock }),
    outbox: createOutbox({ sql, schema, clock }),
    inbox: createInbox({ sql, schema, clock }),
    claims: createClaims({ sql, schema, clock }),
  };
}

/**
 * Webhooks on a bed: a receiver of the source `billing` that verifies `secrets`, served over real
 * HTTP at `url` (its `server`); `sender(options)`, a sender of tenant `acme` allowed to reach
 * loopback; and `processor(handlers)` for the receipts; all on the bed's schema and clock.
 */
export async function startBedWebhooks(bed: Awaited<ReturnType<typeof createTraceBed>>, secrets: string[]) {
  const { sql, schema, clock } = bed;
  const receiver = createWebhookReceiver({
    sql,
    schema,
    clock,
    sources: { billing: createStandardWebhooksVerifier({ secrets }) },
  });
  const server = await startServer('node', receiver);
  const sender = (options: Partial<WebhookSenderOptions> = {}) =>
    createWebhookSender({
      sql,
      schema,
      clock,
      tenant: 'acme',
      allowedDestinations: ['127.0.0.1'],
      ...options,
    });
  const processor = (billing: WebhookHandlers[string]) =>
    createWebhookProcessor({ sql, schema, clock, handlers: { billing } });
  return { server, url: `${server.url}/hooks/billing`, sender, processor };
}

/** The intent the trace suites follow. */
export const order1001 = { tenant: 'acme', operation: 'create-payment', key: 'order-1001' };

/**
 * The trace suites' payment, `order1001` as a multi-step operation on `bed`: a step that adds a
 * `payment.created` event and a `receipts` task (at most `taskAttempts` attempts), then, a second
 * later, a call. Returns the key the call sent downstream.
 */
export async function payOrder1001(bed: Awaited<ReturnType<typeof createTraceBed>>, taskAttempts?: number) {
  const { outbox, claims, clock } = bed;
  const payment = await bed.idem.steps({ ...order1001, request: { amount: 1250 } }, async (op) => {
    await op.step('order', async (tx) => {
      await outbox.add(tx, {
        tenant: 'acme',
        topic: 'payments',
        key: 'order-1001',
        type: 'payment.created',
        payload: {},
      });
      await claims.enqueueIn(tx, {
        tenant: 'acme',
        queue: 'receipts',
        key: 'order-1001',
        payload: {},
        ...(taskAttempts === undefined ? {} : { maxAttempts: taskAttempts }),
      });
    });
    clock.advance(1000);
    return op.call('charge', ({ key }) => Promise.resolve({ key }));
  });
  return payment.value.key;
}
