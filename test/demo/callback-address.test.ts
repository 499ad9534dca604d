/**
 * The fake provider calls the demo back where the demo really listens. Bound to 127.0.0.2 (a
 * loopback address that is not 127.0.0.1, so nothing answers on 127.0.0.1 at its port), a refund
 * made at the provider still reaches the demo's webhook receiver and refunds the payment; the URL
 * the demo reports (and prints in its banner) is that address too.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomSchema, reachableUrl, type DemoHandle } from '../../demo/server.js';
import { dropDemoSchemas, startTestDemo } from '../support/demo.js';
import { until } from '../support/poll.js';

describe('the address the demo calls itself', () => {
  it.each([
    [{ address: '127.0.0.1', family: 'IPv4', port: 3000 }, 'http://127.0.0.1:3000'],
    [{ address: '192.168.1.5', family: 'IPv4', port: 3000 }, 'http://192.168.1.5:3000'],
    [{ address: '0.0.0.0', family: 'IPv4', port: 41000 }, 'http://127.0.0.1:41000'],
    [{ address: '::', family: 'IPv6', port: 41000 }, 'http://[::1]:41000'],
    [{ address: '::1', family: 'IPv6', port: 8080 }, 'http://[::1]:8080'],
  ])('%j → %s', (address, url) => {
    expect(reachableUrl(address)).toBe(url);
  });
});

describe('HOST=127.0.0.2, PORT=0', () => {
  let demo: DemoHandle;
  const schema = randomSchema();
  beforeAll(async () => {
    demo = await startTestDemo(schema, {
      host: '127.0.0.2',
      port: 0,
      amqpUrl: undefined,
      natsUrl: undefined,
    });
  });
  afterAll(async () => {
    await demo?.close();
    await dropDemoSchemas(schema);
  });

  it('reports its real address, and the provider calls the refund webhook back there', async () => {
    expect(demo.url).toMatch(/^http:\/\/127\.0\.0\.2:\d+$/);
    const auth = { authorization: 'Bearer sk_test_acme' };
    const created = await fetch(`${demo.url}/v1/payments`, {
      method: 'POST',
      headers: { ...auth, 'idempotency-key': `cb-${randomUUID()}`, 'content-type': 'application/json' },
      body: JSON.stringify({ amount: 700, currency: 'eur', customer: 'callback' }),
    });
    expect(created.status).toBe(201);
    const payment = (await created.json()) as { id: string; charge_id: string };
    const refund = await fetch(`${demo.providerUrl}/charges/${payment.charge_id}/refunds`, {
      method: 'POST',
      body: '{}',
    });
    expect(refund.status).toBe(200);
    const refunded = await until(
      async () =>
        (await (await fetch(`${demo.url}/v1/payments/${payment.id}`, { headers: auth })).json()) as {
          status: string;
        },
      (p) => p.status === 'refunded',
    );
    expect(refunded.status).toBe('refunded');
  });
});
