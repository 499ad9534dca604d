/**
 * The console as the demo mounts it: `startDemo({ plugins: [demoConsole()] })` serves /console over
 * the demo's own tables, and a payment made through the demo's API shows up there.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demoConsole } from '../../demo/console.js';
import type { RequestDetail, RequestList } from '../../src/console/index.js';
import { randomSchema, type DemoHandle } from '../../demo/server.js';
import { dropDemoSchemas, startTestDemo } from '../support/demo.js';

describe('console in the demo', () => {
  let demo: DemoHandle;
  const schema = randomSchema('idem_console_demo');

  beforeAll(async () => {
    demo = await startTestDemo(schema, {
      host: '127.0.0.1',
      consoleToken: undefined,
      plugins: [demoConsole()],
    });
  });
  afterAll(async () => {
    await demo?.close();
    await dropDemoSchemas(schema);
  });

  it('serves /console and shows a payment made through the demo', async () => {
    const page = await fetch(`${demo.url}/console`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain(`<code>${schema}</code>`);
    const paid = await fetch(`${demo.url}/v1/payments`, {
      method: 'POST',
      headers: {
        authorization: 'Bearer sk_test_acme',
        'idempotency-key': 'console-demo-1',
        'content-type': 'application/json',
      },
      body: JSON.stringify({ amount: 1250, currency: 'eur', customer: 'alice' }),
    });
    expect(paid.status).toBe(201);
    const payment = (await paid.json()) as { id: string };
    const list = (await (await fetch(`${demo.url}/console/api/requests?tenant=acme`)).json()) as RequestList;
    expect(list.rows.map((r) => [r.key, r.state, r.status])).toEqual([['console-demo-1', 'completed', 201]]);
    const row = list.rows[0]!;
    const detail = (await (
      await fetch(
        `${demo.url}/console/api/requests/detail?${new URLSearchParams({ tenant: 'acme', operation: row.operation, key: row.key }).toString()}`,
      )
    ).json()) as RequestDetail;
    expect(JSON.parse(detail.body!.text)).toMatchObject({ id: payment.id, amount: 1250 });
    expect(detail.steps.map((s) => s.step).sort()).toEqual(['charge', 'record-charge', 'record-payment']);
  });

  it('keeps the demo API behind its own auth and the console behind loopback', async () => {
    expect((await fetch(`${demo.url}/v1/payments?customer=alice`)).status).toBe(401);
    const host = new URL(demo.url).host;
    const { request } = await import('undici');
    const res = await request(`${demo.url}/console/api/summary`, {
      headers: { host: `evil.example:${host.split(':')[1]}` },
    });
    await res.body.text();
    expect(res.statusCode).toBe(403);
  });
});
