/**
 * The payments demo end to end: real HTTP, real PostgreSQL, the fake provider, the outbox to the
 * ledger's inbox over each transport (in-database always; RabbitMQ and NATS when their URLs are set).
 */
import { randomUUID } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demoWebhookSecret } from '../../demo/config.js';
import { randomSchema, type DemoHandle } from '../../demo/server.js';
import { dropDemoSchemas, startTestDemo } from '../support/demo.js';
import { until } from '../support/poll.js';
import { serviceUrl } from '../support/services.js';

const transports = [
  { name: 'in-database', env: {} },
  { name: 'rabbitmq', env: { amqpUrl: serviceUrl('AMQP_URL') }, skip: !serviceUrl('AMQP_URL') },
  { name: 'nats', env: { natsUrl: serviceUrl('NATS_URL') }, skip: !serviceUrl('NATS_URL') },
];

/** Registers a test only where it applies, so nothing shows as skipped that was never meant to run. */
const itOnly = (applies: boolean) => (applies ? it : () => undefined);

describe.each(transports.filter((t) => !t.skip))('payments demo over $name', ({ name, env }) => {
  let demo: DemoHandle;
  const schema = randomSchema();
  const auth = (tenant = 'acme') => ({ authorization: `Bearer sk_test_${tenant}` });
  const pay = (key: string | undefined, body: unknown, tenant = 'acme') =>
    fetch(`${demo.url}/v1/payments`, {
      method: 'POST',
      headers: {
        ...auth(tenant),
        'content-type': 'application/json',
        ...(key ? { 'idempotency-key': key } : {}),
      },
      body: JSON.stringify(body),
    });
  const get = async <T>(path: string, tenant = 'acme') =>
    (await (await fetch(`${demo.url}${path}`, { headers: auth(tenant) })).json()) as T;

  beforeAll(async () => {
    demo = await startTestDemo(schema, env);
  });
  afterAll(async () => {
    await demo.close();
    await dropDemoSchemas(schema);
  });

  it('charges once per key, replays byte for byte, and credits the ledger once', async () => {
    const key = `order-${randomUUID()}`;
    const customer = `alice_${name}`;
    const first = await pay(key, { amount: 1250, currency: 'eur', customer });
    expect(first.status).toBe(201);
    const firstBody = await first.text();
    const replay = await pay(key, { currency: 'eur', customer, amount: 1250 });
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.text()).toBe(firstBody);
    const payment = JSON.parse(firstBody) as { id: string; status: string; charge_id: string };
    expect(payment.status).toBe('succeeded');

    const charges = (await (await fetch(`${demo.providerUrl}/charges?customer=${customer}`)).json()) as {
      data: unknown[];
    };
    expect(charges.data).toHaveLength(1);
    const ledger = await until(
      () => get<{ data: { kind: string; payment_id: string }[] }>(`/v1/ledger?customer=${customer}`),
      (l) => l.data.length >= 1,
    );
    expect(ledger.data).toEqual([expect.objectContaining({ kind: 'credit', payment_id: payment.id })]);
  });

  it('runs 30 concurrent identical requests once', async () => {
    const key = `burst-${randomUUID()}`;
    const customer = `burst_${name}`;
    const answers = await Promise.all(
      Array.from({ length: 30 }, () => pay(key, { amount: 500, currency: 'usd', customer })),
    );
    const statuses = answers.map((a) => a.status);
    // Duplicates that outwait the first get 409 with Retry-After; every other answer is the same payment.
    expect(statuses.every((s) => s === 201 || s === 409)).toBe(true);
    const bodies = await Promise.all(answers.filter((a) => a.status === 201).map((a) => a.text()));
    expect(new Set(bodies).size).toBe(1);
    const payments = await get<{ data: unknown[] }>(`/v1/payments?customer=${customer}`);
    expect(payments.data).toHaveLength(1);
    const charges = (await (await fetch(`${demo.providerUrl}/charges?customer=${customer}`)).json()) as {
      data: unknown[];
    };
    expect(charges.data).toHaveLength(1);
  });

  itOnly(name === 'in-database')(
    'stores a declined card (402) and replays it; refuses bad input and bad keys',
    async () => {
      const key = `declined-${randomUUID()}`;
      const first = await pay(key, { amount: 900, currency: 'eur', customer: 'declined_bob' });
      expect(first.status).toBe(402);
      const again = await pay(key, { amount: 900, currency: 'eur', customer: 'declined_bob' });
      expect(again.status).toBe(402);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(await again.text()).toBe(await first.text());

      const invalid = await pay(`bad-${randomUUID()}`, { amount: -1, currency: 'EUR', customer: '' });
      expect(invalid.status).toBe(400);
      expect(invalid.headers.get('content-type')).toContain('application/problem+json');
      expect((await pay(undefined, { amount: 1, currency: 'eur', customer: 'x' })).status).toBe(400);
      expect((await pay(key, { amount: 901, currency: 'eur', customer: 'declined_bob' })).status).toBe(422);
      const unauthorised = await fetch(`${demo.url}/v1/payments`, {
        method: 'POST',
        headers: { authorization: 'Bearer sk_live_x' },
      });
      expect(unauthorised.status).toBe(401);
    },
  );

  itOnly(name === 'in-database')(
    'keeps tenants apart: another tenant with the same key gets its own payment',
    async () => {
      const key = `shared-${randomUUID()}`;
      const a = (await (
        await pay(key, { amount: 100, currency: 'eur', customer: 'carol' }, 'tenant_a')
      ).json()) as { id: string };
      const bResponse = await pay(key, { amount: 100, currency: 'eur', customer: 'carol' }, 'tenant_b');
      expect(bResponse.headers.get('idempotent-replayed')).toBeNull();
      const b = (await bResponse.json()) as { id: string };
      expect(b.id).not.toBe(a.id);
      expect(
        (await get<{ data: { id: string }[] }>('/v1/payments?customer=carol', 'tenant_b')).data.map(
          (p) => p.id,
        ),
      ).toEqual([b.id]);
      expect((await fetch(`${demo.url}/v1/payments/${a.id}`, { headers: auth('tenant_b') })).status).toBe(
        404,
      );
    },
  );

  itOnly(name === 'in-database')(
    'applies a refund webhook once, even when it is delivered again',
    async () => {
      const customer = `refund_${randomUUID().slice(0, 8)}`;
      const payment = (await (
        await pay(`r-${randomUUID()}`, { amount: 700, currency: 'eur', customer })
      ).json()) as { id: string; charge_id: string };
      // The provider refunds and sends a signed charge.refunded webhook to the demo.
      expect(
        (
          await fetch(`${demo.providerUrl}/charges/${payment.charge_id}/refunds`, {
            method: 'POST',
            body: '{}',
          })
        ).status,
      ).toBe(200);
      const refunded = await until(
        () => get<{ status: string }>(`/v1/payments/${payment.id}`),
        (p) => p.status === 'refunded',
      );
      expect(refunded.status).toBe('refunded');

      // A replayed delivery (same webhook-id) and the same refund under a new id both change nothing.
      const webhook = new Webhook(demoWebhookSecret);
      const send = async (id: string, body: string) => {
        const now = new Date();
        return fetch(`${demo.url}/webhooks/provider`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'webhook-id': id,
            'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
            'webhook-signature': webhook.sign(id, now, body),
          },
          body,
        });
      };
      const { rows } = await demo.pool.query<{ delivery_id: string; body: string }>(
        `SELECT delivery_id, convert_from(body, 'UTF8') AS body FROM ${schema}.webhook_receipts WHERE source = 'provider' AND convert_from(body, 'UTF8') LIKE $1`,
        [`%${payment.charge_id}%`],
      );
      expect(rows).toHaveLength(1);
      expect((await send(rows[0]!.delivery_id, rows[0]!.body)).status).toBe(200); // the provider's delivery, again
      expect((await send(`msg_${randomUUID()}`, rows[0]!.body)).status).toBe(202); // the same refund, a new id
      await new Promise((r) => setTimeout(r, 1500));
      const ledger = await until(
        () => get<{ data: { kind: string }[] }>(`/v1/ledger?customer=${customer}`),
        (l) => l.data.length >= 2,
      );
      expect(ledger.data.map((e) => e.kind).sort()).toEqual(['credit', 'reversal']);
      const bad = await fetch(`${demo.url}/webhooks/provider`, {
        method: 'POST',
        headers: { 'webhook-id': 'x', 'webhook-timestamp': '1', 'webhook-signature': 'v1,AAAA' },
        body: '{}',
      });
      expect(bad.status).toBe(401);
    },
  );
});
