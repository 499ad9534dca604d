/**
 * One payment's trace, end to end: a payment made through the demo's HTTP API and, after it
 * settled, a partial refund at the provider; then `idem trace --json` (the CLI, as an operator runs
 * it) lists its request, the `record-payment` step, the `charge` call with the key it sent the
 * provider, `record-charge`, the `payment.created` event it published, the receipt task and the
 * ledger's credit; then the provider's refund webhook (processed on behalf of the payment), the
 * `payment.refunded` event and the ledger's reversal, in causal order with their times. The reverse
 * lookups from the ledger's message ids and from the refund webhook's delivery id find the same
 * intent. Over the in-database transport always, and RabbitMQ when AMQP_URL is set. Nothing is
 * bounded by time: the test waits for the ledger, the receipt worker and the webhook processor by
 * what they recorded.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomSchema, type DemoHandle } from '../../demo/server.js';
import { createPaymentOperation } from '../../demo/payments.js';
import { createTrace, type Timeline, type TimelineItem } from 'idem';
import { fromPg } from 'idem/pg';
import { databaseUrl } from '../support/database.js';
import { dropDemoSchemas, startTestDemo } from '../support/demo.js';
import { serviceUrl } from '../support/services.js';

const main = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));

const transports = [
  { name: 'in-database', env: {} },
  { name: 'rabbitmq', env: { amqpUrl: serviceUrl('AMQP_URL') }, skip: !serviceUrl('AMQP_URL') },
];

/** `npm run idem -- trace …`: the CLI in a process of its own, as an operator runs it. */
function idemTrace(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', main, 'trace', ...args],
      { env: { ...process.env, DATABASE_URL: databaseUrl() } },
      (error, stdout, stderr) => {
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
      },
    );
  });
}

/** What an item is, in a word: its kind and its name, type, queue or consumer. */
function label(item: TimelineItem): string {
  switch (item.kind) {
    case 'step':
      return `${item.stepKind} ${item.name}`;
    case 'outbox':
      return `outbox ${item.type}`;
    case 'task':
      return `task ${item.queue}`;
    case 'consumption':
      return `consumed by ${item.consumer}`;
    case 'webhook-received':
      return `received ${item.type}`;
    default:
      return item.kind;
  }
}

describe.each(transports.filter((t) => !t.skip))("one payment's trace over $name", ({ env }) => {
  let demo: DemoHandle;
  const schema = randomSchema('idem_demo_trace');
  const key = `order-${randomUUID()}`;
  const customer = `trace_${randomUUID().slice(0, 8)}`;
  let payment: { id: string; status: string; charge_id: string };

  beforeAll(async () => {
    demo = await startTestDemo(schema, env);
    const response = await fetch(`${demo.url}/v1/payments`, {
      method: 'POST',
      headers: {
        authorization: 'Bearer sk_test_acme',
        'content-type': 'application/json',
        'idempotency-key': key,
      },
      body: JSON.stringify({ amount: 1250, currency: 'eur', customer }),
    });
    expect(response.status).toBe(201);
    payment = (await response.json()) as typeof payment;
    // The ledger's credit and the receipt are asynchronous: wait for what they record, untimed.
    const trace = createTrace({ sql: fromPg(demo.pool), schema });
    const until = async (settled: (items: TimelineItem[]) => boolean) => {
      for (;;) {
        const timeline = await trace.intent({ tenant: 'acme', operation: createPaymentOperation, key });
        if (timeline && settled(timeline.items)) return;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    };
    const processed = (items: TimelineItem[]) =>
      items.filter((i) => i.kind === 'consumption' && i.state === 'processed').length;
    await until(
      (items) => processed(items) === 1 && items.some((i) => i.kind === 'task' && i.state === 'completed'),
    );
    // Later, the customer is refunded at the provider, which sends a signed webhook; the ledger's
    // reversal follows it.
    const refund = await fetch(`${demo.providerUrl}/charges/${payment.charge_id}/refunds`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ amount: 400 }),
    });
    expect(refund.status).toBeLessThan(300);
    await refund.text();
    await until((items) => processed(items) === 2 && items.some((i) => i.kind === 'webhook-received'));
  });
  afterAll(async () => {
    await demo?.close();
    await dropDemoSchemas(schema);
  });

  it('lists the request, its steps and call, the event, the receipt task, the ledger and the refund, in causal order', async () => {
    const run = await idemTrace(['acme', createPaymentOperation, key, '--json', '--schema', schema]);
    expect(run.code, run.stderr).toBe(0);
    const timeline = JSON.parse(run.stdout) as Timeline;
    expect(timeline.intent).toEqual({
      tenant: 'acme',
      operation: createPaymentOperation,
      key,
      ref: `acme/${encodeURIComponent(createPaymentOperation)}/${key}`,
    });
    // The ledger's credit and the receipt task may finish in either order: both follow the event.
    const labels = timeline.items.map(label);
    expect(labels.slice(0, 5)).toEqual([
      'request',
      'local record-payment',
      'call charge',
      'local record-charge',
      'outbox payment.created',
    ]);
    expect(new Set(labels.slice(5, 7))).toEqual(new Set(['task receipts', 'consumed by ledger']));
    expect(labels.slice(7)).toEqual([
      'received charge.refunded',
      'outbox payment.refunded',
      'consumed by ledger',
    ]);
    const item = <Kind extends TimelineItem['kind']>(kind: Kind, at: number) =>
      timeline.items.filter((i) => i.kind === kind)[at] as Extract<TimelineItem, { kind: Kind }>;
    const [request, recordPayment, charge, recordCharge, event] = timeline.items as [
      Extract<TimelineItem, { kind: 'request' }>,
      Extract<TimelineItem, { kind: 'step' }>,
      Extract<TimelineItem, { kind: 'step' }>,
      Extract<TimelineItem, { kind: 'step' }>,
      Extract<TimelineItem, { kind: 'outbox' }>,
    ];
    const task = item('task', 0);
    const [consumed, reversed] = [item('consumption', 0), item('consumption', 1)];
    const [received, refunded] = [item('webhook-received', 0), item('outbox', 1)];
    expect(request).toMatchObject({ state: 'completed', causedBy: null, fence: 1 });
    for (const step of [recordPayment, charge, recordCharge]) {
      expect(step).toMatchObject({ recorded: true, fence: 1 });
      expect(step.derivedKey).toMatch(/^idem_/);
    }
    // The payment's id is made from record-payment's key; the charge's key is what the provider got.
    expect(payment.id).toBe(`pay_${recordPayment.derivedKey!.slice(5, 29)}`);
    const charges = (await (await fetch(`${demo.providerUrl}/charges?customer=${customer}`)).json()) as {
      data: { idempotency_key: string }[];
    };
    expect(charges.data.map((c) => c.idempotency_key)).toEqual([charge.derivedKey]);
    expect(event).toMatchObject({ topic: 'payments', orderingKey: payment.id, deadAt: null, tenant: 'acme' });
    expect(event.publishedAt).not.toBeNull();
    expect(task).toMatchObject({ key: `receipt:${payment.id}`, state: 'completed', tenant: 'acme' });
    expect(task.finishedAt).not.toBeNull();
    // One credit: one inbox record of the event, processed once.
    expect(consumed).toMatchObject({ messageId: event.id, state: 'processed', duplicates: 0 });
    // The refund: the provider's webhook, processed on behalf of the payment; its event, consumed
    // once by the ledger (one reversal).
    expect(received).toMatchObject({
      source: 'provider',
      type: 'charge.refunded',
      relation: 'acted-for',
      state: 'applied',
      senderIntent: null,
    });
    expect(received.processedAt).not.toBeNull();
    expect(refunded).toMatchObject({
      type: 'payment.refunded',
      orderingKey: payment.id,
      deadAt: null,
      tenant: 'acme',
    });
    expect(refunded.publishedAt).not.toBeNull();
    expect(reversed).toMatchObject({ messageId: refunded.id, state: 'processed', duplicates: 0 });

    // Every item has its time, and the times follow the causal order.
    const times = timeline.items.map((item) => Date.parse(item.at!));
    expect(times.every(Number.isFinite)).toBe(true);
    expect([...times].sort((a, b) => a - b)).toEqual(times);
    expect(Date.parse(charge.completedAt!)).toBeLessThanOrEqual(Date.parse(recordCharge.at!));
    expect(Date.parse(consumed.at!)).toBeGreaterThanOrEqual(Date.parse(event.at!));
    expect(Date.parse(received.processedAt!)).toBeGreaterThanOrEqual(Date.parse(refunded.at!));
  });

  it("the refund's delivery id and its ledger message id lead back to the payment", async () => {
    const ledger = (await (
      await fetch(`${demo.url}/v1/ledger?customer=${customer}`, {
        headers: { authorization: 'Bearer sk_test_acme' },
      })
    ).json()) as { data: { kind: string; payment_id: string; event_id: string; amount: number }[] };
    const reversals = ledger.data.filter((entry) => entry.kind === 'reversal');
    expect(reversals).toEqual([expect.objectContaining({ payment_id: payment.id, amount: -400 })]);
    const byMessage = await idemTrace([
      '--message',
      reversals[0]!.event_id,
      '--tenant',
      'acme',
      '--json',
      '--schema',
      schema,
    ]);
    expect(byMessage.code, byMessage.stderr).toBe(0);
    expect((JSON.parse(byMessage.stdout) as Timeline).intent).toMatchObject({
      operation: createPaymentOperation,
      key,
    });

    // The delivery id the provider sent the refund under (its `webhook-id`), as the receiver kept it.
    const { rows } = await demo.pool.query<{ delivery_id: string }>(
      `SELECT delivery_id FROM "${schema}".webhook_receipts WHERE event_type = 'charge.refunded'`,
    );
    expect(rows).toHaveLength(1);
    const deliveryId = rows[0]!.delivery_id;
    const byDelivery = await idemTrace([
      '--delivery',
      deliveryId,
      '--source',
      'provider',
      '--json',
      '--schema',
      schema,
    ]);
    expect(byDelivery.code, byDelivery.stderr).toBe(0);
    const found = JSON.parse(byDelivery.stdout) as Timeline;
    expect(found.lookup).toMatchObject({ by: 'delivery', value: deliveryId, source: 'provider' });
    expect(found.intent).toMatchObject({ tenant: 'acme', operation: createPaymentOperation, key });
  });

  it('credits the ledger once, and the ledger message id leads back to the payment', async () => {
    const ledger = (await (
      await fetch(`${demo.url}/v1/ledger?customer=${customer}`, {
        headers: { authorization: 'Bearer sk_test_acme' },
      })
    ).json()) as { data: { kind: string; payment_id: string; event_id: string }[] };
    const credits = ledger.data.filter((entry) => entry.kind === 'credit');
    expect(credits).toEqual([expect.objectContaining({ payment_id: payment.id })]);
    const messageId = credits[0]!.event_id;

    const run = await idemTrace(['--message', messageId, '--tenant', 'acme', '--json', '--schema', schema]);
    expect(run.code, run.stderr).toBe(0);
    const found = JSON.parse(run.stdout) as Timeline;
    expect(found.lookup).toEqual({ by: 'message', value: messageId });
    expect(found.intent).toMatchObject({ tenant: 'acme', operation: createPaymentOperation, key });
    expect(found.items.map(label)).toContain('consumed by ledger');

    // And from the key the provider was sent (what its dashboard shows).
    const trace = createTrace({ sql: fromPg(demo.pool), schema });
    const byKey = await trace.intent({ tenant: 'acme', operation: createPaymentOperation, key });
    const charge = byKey!.items.find((i) => i.kind === 'step' && i.name === 'charge') as Extract<
      TimelineItem,
      { kind: 'step' }
    >;
    const fromProvider = await trace.derivedKey(charge.derivedKey!);
    expect(fromProvider?.intent).toMatchObject({ operation: createPaymentOperation, key });
  });
});
