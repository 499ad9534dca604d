/**
 * The demo's event counters on GET /metrics: webhook deliveries its receiver refused, by reason,
 * and events its ledger inbox acknowledged as duplicates. Real HTTP, real PostgreSQL, the demo as
 * `npm start` runs it (in-database transport), and over RabbitMQ when AMQP_URL is set.
 */
import { randomUUID } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demoWebhookSecret } from '../../demo/config.js';
import { randomSchema, type DemoHandle } from '../../demo/server.js';
import { dropDemoSchemas, startTestDemo } from '../support/demo.js';
import { until } from '../support/poll.js';
import { serviceUrl } from '../support/services.js';

/** The value of one sample line of the Prometheus text, or 0 when the series is absent. */
function sample(text: string, name: string, labels: Record<string, string>): number {
  const rendered = Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .join(',');
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${rendered}} `));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

const auth = { authorization: 'Bearer sk_test_acme' };

/** Pays once, waits for the ledger's credit, and returns what a redelivery test needs. */
async function payAndSettle(demo: DemoHandle, schema: string) {
  const customer = `dup_${randomUUID().slice(0, 8)}`;
  const paid = await fetch(`${demo.url}/v1/payments`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json', 'idempotency-key': `dup-${randomUUID()}` },
    body: JSON.stringify({ amount: 1250, currency: 'eur', customer }),
  });
  expect(paid.status).toBe(201);
  const payment = (await paid.json()) as { id: string };
  const ledger = async () =>
    (
      (await (await fetch(`${demo.url}/v1/ledger?customer=${customer}`, { headers: auth })).json()) as {
        data: { kind: string }[];
      }
    ).data;
  expect((await until(ledger, (l) => l.length >= 1)).map((e) => e.kind)).toEqual(['credit']);
  const { rows } = await demo.pool.query<{ id: string; payload: unknown }>(
    `SELECT id::text, payload FROM ${schema}.outbox WHERE type = 'payment.created' AND payload->>'id' = $1`,
    [payment.id],
  );
  expect(rows).toHaveLength(1);
  const duplicates = async () =>
    sample(await (await fetch(`${demo.url}/metrics`)).text(), 'idem_inbox_duplicates_total', {
      consumer: 'ledger',
    });
  const inboxDuplicates = async () =>
    (
      await demo.pool.query<{ duplicates: number }>(
        `SELECT duplicates FROM ${schema}.inbox WHERE consumer = 'ledger' AND message_id = $1`,
        [rows[0]!.id],
      )
    ).rows;
  return { event: rows[0]!, ledger, duplicates, inboxDuplicates };
}

describe('payments demo metrics', () => {
  let demo: DemoHandle;
  const schema = randomSchema();
  const metrics = async () => (await fetch(`${demo.url}/metrics`)).text();
  const rejections = async (reason: string) =>
    sample(await metrics(), 'idem_webhook_rejections_total', { reason });

  beforeAll(async () => {
    demo = await startTestDemo(schema, { amqpUrl: undefined, natsUrl: undefined });
  });
  afterAll(async () => {
    await demo?.close();
    await dropDemoSchemas(schema);
  });

  /** Posts to the demo's webhook route as the provider would, signed by `signer` at `signedAt`. */
  const deliver = (body: string, options: { id?: string | null; signer?: Webhook; signedAt?: Date } = {}) => {
    const id = options.id === undefined ? `msg_${randomUUID()}` : options.id;
    const signedAt = options.signedAt ?? new Date();
    const signer = options.signer ?? new Webhook(demoWebhookSecret);
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'webhook-timestamp': String(Math.floor(signedAt.getTime() / 1000)),
      'webhook-signature': signer.sign(id ?? 'msg_unknown', signedAt, body),
    };
    if (id !== null) headers['webhook-id'] = id;
    return fetch(`${demo.url}/webhooks/provider`, { method: 'POST', headers, body });
  };

  it('counts refused webhook deliveries by reason, and never an accepted one', async () => {
    const body = JSON.stringify({
      type: 'charge.refunded',
      data: { charge_id: 'ch_none', amount: 1, version: 1 },
    });
    expect(await rejections('signature')).toBe(0);

    // Forged: signed with a secret the demo does not hold.
    const forger = new Webhook(`whsec_${Buffer.from('not-the-provider-secret-at-all!!').toString('base64')}`);
    expect((await deliver(body, { signer: forger })).status).toBe(401);
    // Authentic signature, but signed an hour ago (a captured delivery replayed late).
    expect((await deliver(body, { signedAt: new Date(Date.now() - 3_600_000) })).status).toBe(401);
    // Signed in the future beyond the tolerance.
    expect((await deliver(body, { signedAt: new Date(Date.now() + 3_600_000) })).status).toBe(401);
    // No webhook-id: nothing to deduplicate on.
    expect((await deliver(body, { id: null })).status).toBe(400);
    // Over the 1 MiB limit, refused by Fastify's body limit and answered by the receiver.
    expect((await deliver(' '.repeat(1024 * 1024 + 1))).status).toBe(413);

    // An accepted delivery and its duplicate are not rejections.
    const id = `msg_${randomUUID()}`;
    expect((await deliver(body, { id })).status).toBe(202);
    expect((await deliver(body, { id })).status).toBe(200);

    const text = await metrics();
    expect(sample(text, 'idem_webhook_rejections_total', { reason: 'signature' })).toBe(1);
    expect(sample(text, 'idem_webhook_rejections_total', { reason: 'timestamp' })).toBe(2);
    expect(sample(text, 'idem_webhook_rejections_total', { reason: 'malformed' })).toBe(1);
    expect(sample(text, 'idem_webhook_rejections_total', { reason: 'too-large' })).toBe(1);
    const { rows } = await demo.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${schema}.webhook_receipts`,
    );
    expect(rows[0]!.n).toBe(1); // only the accepted delivery was stored
  });

  it('counts an event the ledger inbox acknowledged as a duplicate, and credits once', async () => {
    const { event, ledger, duplicates, inboxDuplicates } = await payAndSettle(demo, schema);
    expect(await duplicates()).toBe(0);

    // The state a dispatcher leaves when it is killed after publishing and before its mark
    // commits: the event is pending again, and is delivered a second time with the same id.
    const { rowCount } = await demo.pool.query(
      `UPDATE ${schema}.outbox SET published_at = NULL WHERE id = $1 AND published_at IS NOT NULL`,
      [event.id],
    );
    expect(rowCount).toBe(1);

    expect(await until(duplicates, (n) => n >= 1)).toBe(1);
    expect((await ledger()).map((e) => e.kind)).toEqual(['credit']);
    expect(await inboxDuplicates()).toEqual([{ duplicates: 1 }]);
  });
});

const amqpUrl = serviceUrl('AMQP_URL');

describe.runIf(amqpUrl)('payments demo metrics over RabbitMQ', () => {
  let demo: DemoHandle;
  const schema = randomSchema();

  beforeAll(async () => {
    demo = await startTestDemo(schema, { amqpUrl, natsUrl: undefined });
  });
  afterAll(async () => {
    await demo?.close();
    await dropDemoSchemas(schema);
  });

  it('counts a message the broker delivers again as an inbox duplicate, and credits once', async () => {
    const { event, ledger, duplicates, inboxDuplicates } = await payAndSettle(demo, schema);
    expect(await duplicates()).toBe(0);

    // The broker delivers the same message again (as after a consumer's lost ack): same
    // message_id and tenant header (the payment's, which the event names), onto the ledger's queue.
    const amqp = await import('amqplib');
    const connection = await amqp.connect(amqpUrl!);
    try {
      const channel = await connection.createConfirmChannel();
      channel.sendToQueue(`idem-demo-${schema}.ledger`, Buffer.from(JSON.stringify(event.payload)), {
        messageId: event.id,
        type: 'payment.created',
        contentType: 'application/json',
        persistent: true,
        headers: { 'idem-tenant': 'acme' },
      });
      await channel.waitForConfirms();
    } finally {
      await connection.close();
    }

    expect(await until(duplicates, (n) => n >= 1)).toBe(1);
    expect((await ledger()).map((e) => e.kind)).toEqual(['credit']);
    expect(await inboxDuplicates()).toEqual([{ duplicates: 1 }]);
  });
});
