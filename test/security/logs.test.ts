/**
 * No secret, signature, API key or stored response body in the logs. The payments demo runs as
 * its own process (`idem demo`, the way an operator runs it) with its output captured; it serves
 * payments, replays, refusals, a refund webhook from the provider, and forged webhooks and
 * requests; then every byte it wrote to stdout and stderr is searched for what must not be there.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { demoWebhookSecret } from '../../demo/config.js';
import { randomSchema } from '../../demo/server.js';
import { databaseUrl } from '../support/database.js';

const schema = randomSchema('idem_logs');
const marker = `zq${randomBytes(6).toString('hex')}`; // in customer names: would show a logged body
const apiKey = `sk_test_t${randomBytes(6).toString('hex')}`; // the tenant's API key
const wrongKey = `sk_live_${randomBytes(12).toString('hex')}`; // a refused API key
const forged = `v1,${randomBytes(32).toString('base64')}`; // a forged signature
let demo: ChildProcess;
let output = '';
let url = '';
let providerUrl = '';

beforeAll(async () => {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATABASE_URL: databaseUrl(),
    IDEM_SCHEMA: schema,
    PORT: '0',
    PROVIDER_PORT: '0',
    LEASE_MS: '2000',
  };
  delete env.AMQP_URL;
  delete env.NATS_URL;
  delete env.PROVIDER_URL;
  demo = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'demo'], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const collect = (chunk: Buffer) => (output += chunk.toString('utf8'));
  demo.stdout!.on('data', collect);
  demo.stderr!.on('data', collect);
  const deadline = Date.now() + 90_000;
  while (!/listening on (\S+) .*provider: (http:\/\/[\d.:]+)\)/.test(output)) {
    if (Date.now() > deadline || demo.exitCode !== null) throw new Error(`demo did not start:\n${output}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const banner = /listening on (\S+) .*provider: (http:\/\/[\d.:]+)\)/.exec(output)!;
  url = banner[1]!;
  providerUrl = banner[2]!;
}, 120_000);

afterAll(async () => {
  if (demo.exitCode === null) {
    demo.kill('SIGTERM');
    await new Promise((resolve) => demo.once('exit', resolve));
  }
  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE; DROP SCHEMA IF EXISTS ${schema}_demo CASCADE`);
  await client.end();
}, 60_000);

const pay = (key: string, body: unknown, authorization = `Bearer ${apiKey}`) =>
  fetch(`${url}/v1/payments`, {
    method: 'POST',
    headers: { authorization, 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });

it('serves payments, refunds and forgeries without writing secrets, signatures or bodies to its logs', async () => {
  const answers: string[] = [];
  const keep = async (response: Response) => {
    const text = await response.text();
    answers.push(text);
    return { status: response.status, text };
  };
  const key = `logs-${randomUUID()}`;
  const first = await keep(await pay(key, { amount: 4321, currency: 'eur', customer: `${marker}_alice` }));
  expect(first.status).toBe(201);
  const payment = JSON.parse(first.text) as { id: string; charge_id: string };
  expect(
    (await keep(await pay(key, { amount: 4321, currency: 'eur', customer: `${marker}_alice` }))).status,
  ).toBe(201);
  expect(
    (await keep(await pay(key, { amount: 9999, currency: 'eur', customer: `${marker}_alice` }))).status,
  ).toBe(422);
  expect(
    (
      await keep(
        await pay(`d-${randomUUID()}`, { amount: 5, currency: 'eur', customer: `declined_${marker}` }),
      )
    ).status,
  ).toBe(402);
  expect(
    (await keep(await pay(`i-${randomUUID()}`, { amount: -5, currency: 'EUR', customer: marker }))).status,
  ).toBe(400);
  expect(
    (
      await keep(
        await pay(
          `w-${randomUUID()}`,
          { amount: 5, currency: 'eur', customer: marker },
          `Bearer ${wrongKey}`,
        ),
      )
    ).status,
  ).toBe(401);

  // A refund at the provider: a signed webhook to the demo, processed later.
  expect(
    (await fetch(`${providerUrl}/charges/${payment.charge_id}/refunds`, { method: 'POST', body: '{}' }))
      .status,
  ).toBe(200);
  const deadline = Date.now() + 30_000;
  for (;;) {
    const current = (await (
      await fetch(`${url}/v1/payments/${payment.id}`, { headers: { authorization: `Bearer ${apiKey}` } })
    ).json()) as { status: string };
    if (current.status === 'refunded') break;
    if (Date.now() > deadline) throw new Error('the refund webhook was not processed');
    await new Promise((r) => setTimeout(r, 200));
  }

  // Forgeries: a wrong signature, a signature with another secret, a stale timestamp.
  const body = JSON.stringify({
    type: 'charge.refunded',
    data: { charge_id: payment.charge_id, amount: 1, version: 99 },
  });
  const ts = String(Math.floor(Date.now() / 1000));
  const otherSecret = createHmac('sha256', 'not-the-secret').update(`msg_x.${ts}.${body}`).digest('base64');
  for (const [signature, timestamp] of [
    [forged, ts],
    [`v1,${otherSecret}`, ts],
    [forged, String(Number(ts) - 3600)],
  ]) {
    const response = await fetch(`${url}/webhooks/provider`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'webhook-id': `msg_${randomUUID()}`,
        'webhook-timestamp': timestamp!,
        'webhook-signature': signature!,
      },
      body,
    });
    expect(response.status).toBe(401);
  }
  await new Promise((r) => setTimeout(r, 500)); // let the last lines reach the pipes

  // The capture works: the banner and the receiver's rejection warnings are there.
  expect(output).toContain('idem demo listening on');
  expect(output).toMatch(/webhook rejected/);

  const forbidden: [string, string][] = [
    ['webhook secret', demoWebhookSecret],
    ['webhook secret (base64 body)', demoWebhookSecret.slice('whsec_'.length)],
    [
      'webhook secret (decoded)',
      Buffer.from(demoWebhookSecret.slice('whsec_'.length), 'base64').toString('utf8'),
    ],
    ['API key', apiKey],
    ['refused API key', wrongKey],
    ['forged signature', forged.slice(3)],
    ['signature from another secret', otherSecret],
    ['a customer from a request or response body', marker],
    ['payment id from a stored response', payment.id],
    ['charge id from a stored response', payment.charge_id],
  ];
  for (const [what, value] of forbidden)
    expect(output.includes(value), `${what} appears in the logs`).toBe(false);
  // No Standard Webhooks signature of any kind (the provider's genuine ones included).
  expect(output).not.toMatch(/v1a?,[A-Za-z0-9+/]{40,}={0,2}/);
  expect(answers.length).toBe(6);
}, 120_000);
