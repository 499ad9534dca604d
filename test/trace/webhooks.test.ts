/**
 * Webhooks in an intent's causation, on a real PostgreSQL and a real HTTP server: an intent
 * enqueues a webhook; idem's sender delivers it to idem's own receiver, whose request carries the
 * sender's `traceparent` and `idem-intent`; the receipt's handler runs in a child span of the
 * sender's trace and starts an operation, which names the receipt as its cause. `createTrace`
 * (and `idem trace --delivery`) then lead from the receipt to the intents, and back.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTrace, type Sql, type Timeline } from 'idem';
import { generateWebhookSecret } from 'idem/webhooks';
import { databaseUrl, type TestSchema } from '../support/database.js';
import { createTraceBed, startBedWebhooks } from '../support/trace.js';
import type { TestServer } from '../webhooks/support.js';
import { installMemoryTracer, type RecordedSpan } from './memory-tracer.js';

const billing = { tenant: 'acme', operation: 'bill', key: 'invoice-7' };
const billingRef = 'acme/bill/invoice-7';
const messageId = 'msg_invoice-7';
const applyRef = `acme/apply-invoice/${messageId}`;
const traceparentOf = (span: RecordedSpan) => `00-${span.traceId}-${span.spanId}-01`;

describe('a webhook traced from the sending intent to the receiving one', () => {
  let db: TestSchema;
  let sql: Sql;
  let spans: RecordedSpan[];
  let server: TestServer;

  beforeAll(async () => {
    spans = installMemoryTracer();
    const bed = await createTraceBed();
    ({ db, sql } = bed);
    const { clock, idem } = bed;
    const secret = generateWebhookSecret();

    const webhooks = await startBedWebhooks(bed, [secret]);
    server = webhooks.server;
    const sender = webhooks.sender();
    await sender.endpoints.create({ id: 'ledger', url: webhooks.url, secrets: [secret] });

    await idem.run({ ...billing, request: { invoice: 7 } }, async () => {
      await sender.enqueue(sql, {
        id: messageId,
        type: 'invoice.paid',
        payload: { type: 'invoice.paid', data: { invoice: 7 } },
      });
      return 'billed';
    });
    clock.advance(1000);
    expect((await sender.drain()).map((r) => r.outcome)).toEqual(['delivered']);

    clock.advance(1000);
    const processor = webhooks.processor({
      'invoice.paid': async (tx, event) => {
        await idem.runIn(tx, { tenant: 'acme', operation: 'apply-invoice', key: event.deliveryId }, () =>
          Promise.resolve('applied'),
        );
      },
    });
    expect(await processor.drain()).toEqual(['applied']);
  });

  afterAll(async () => {
    await server?.close();
    await db?.close();
  });

  it('sends the trace context and intent, and runs the handler in a child span of the sender', async () => {
    const run = spans.find(
      (span) => span.name === 'idem.run' && span.attributes['idem.operation'] === 'bill',
    );
    expect(run).toBeDefined();
    const { rows: receipts } = await db.pool.query(
      `SELECT intent, traceparent FROM "${db.schema}".webhook_receipts WHERE delivery_id = $1`,
      [messageId],
    );
    expect(receipts).toEqual([{ intent: billingRef, traceparent: traceparentOf(run!) }]);
    const handle = spans.find((span) => span.name === 'idem.webhooks.handle')!;
    expect(handle).toMatchObject({ traceId: run!.traceId, parentSpanId: run!.spanId, ended: true });
    expect(handle.attributes).toMatchObject({
      'idem.webhook.source': 'billing',
      'idem.webhook.delivery_id': messageId,
    });
    const { rows: requests } = await db.pool.query(
      `SELECT caused_by FROM "${db.schema}".requests WHERE operation = 'apply-invoice'`,
    );
    // The receipt's reference: webhook:<tenant>:<source>:<delivery id> (the default tenant is '').
    expect(requests).toEqual([{ caused_by: `webhook::billing:${messageId}` }]);
  });

  it('finds the intents a received delivery touched, and the sending intent lists the delivery', async () => {
    const trace = createTrace({ sql, schema: db.schema });
    const received = (await trace.delivery(messageId, { source: 'billing' }))!;
    expect(received.intent.ref).toBe(applyRef);
    expect(received.lookup).toEqual({
      by: 'delivery',
      value: messageId,
      source: 'billing',
      intents: [applyRef, billingRef],
    });
    expect(received.items.map((item) => item.kind)).toEqual(['request', 'webhook-received']);
    expect(received.items[1]).toMatchObject({ relation: 'caused', source: 'billing', state: 'applied' });

    const sent = (await trace.delivery(messageId, { tenant: 'acme' }))!;
    expect(sent.intent.ref).toBe(billingRef);
    expect(sent.items.map((item) => item.kind)).toEqual([
      'request',
      'webhook-sent',
      'webhook-attempt',
      'webhook-received',
    ]);
    expect(sent.items[1]).toMatchObject({
      messageId,
      endpointId: 'ledger',
      state: 'delivered',
      attempts: 1,
      lastStatus: 202,
    });
    expect(sent.items[2]).toMatchObject({ attempt: 1, status: 202, outcome: 'delivered' });
    expect(sent.items[3]).toMatchObject({ relation: 'sent', senderIntent: billingRef });
    expect(await trace.intent(billing)).toEqual({ ...sent, lookup: { by: 'intent' } });
    expect(await trace.delivery('msg_unknown', { source: 'billing' })).toBeNull();
    expect(await trace.delivery('msg_unknown')).toBeNull();
  });

  it('answers idem trace --delivery', async () => {
    const cli = (...args: string[]) =>
      promisify(execFile)(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'trace', ...args], {
        env: { ...process.env, DATABASE_URL: databaseUrl() },
      });
    const json = await cli('--delivery', messageId, '--source', 'billing', '--schema', db.schema, '--json');
    expect((JSON.parse(json.stdout) as Timeline).intent.ref).toBe(applyRef);
    const human = await cli('--delivery', messageId, '--schema', db.schema);
    expect(human.stdout).toContain(`intent ${billingRef}`);
    expect(human.stdout).toContain(`found by delivery ${messageId}`);
    expect(human.stdout).toContain('invoice.paid → ledger');
  });
});
