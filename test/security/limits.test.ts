/**
 * Size limits hold at their documented defaults, at the boundary and one byte past it, and a
 * refused request never reaches the handler: the request body (1 MiB, declared or streamed), the
 * key (255 characters), the header section (node:http's 16 KiB), and the webhook body (1 MiB).
 */
import { createHmac, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { defaultMaxBodyBytes } from 'idem/http';
import { idempotency as nodeIdempotency, webhooks as nodeWebhooks } from 'idem/node-http';
import { createIdem } from 'idem';
import { createStandardWebhooksVerifier, createWebhookReceiver } from 'idem/webhooks';
import { post, rawRequest } from '../support/hostile/raw-http.js';
import { createTestSchema, type TestSchema } from '../support/database.js';

const secret = Buffer.from('limits-test-secret-limits-test-secret');
let db: TestSchema;
let api: Server;
let hooks: Server;
let apiPort: number;
let hookPort: number;
let handled = 0;

const listen = (server: Server) =>
  new Promise<number>((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
  );

beforeAll(async () => {
  db = await createTestSchema();
  const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema });
  const handler = nodeIdempotency({
    idem,
    tenant: () => 'acme',
    route: '/orders',
    handler: async (_req, res) => {
      handled++;
      res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}');
    },
  });
  api = createServer((req, res) => void handler(req, res));
  const receiver = createWebhookReceiver({
    sql: fromPg(db.pool),
    schema: db.schema,
    sources: { billing: createStandardWebhooksVerifier({ secrets: [secret] }) },
  });
  hooks = createServer((req, res) => void nodeWebhooks({ receiver: receiver, source: 'billing' })(req, res));
  [apiPort, hookPort] = await Promise.all([listen(api), listen(hooks)]);
});
afterAll(async () => {
  await new Promise<void>((resolve) => api.close(() => resolve()));
  await new Promise<void>((resolve) => hooks.close(() => resolve()));
  await db.close();
});

/** A JSON string body of exactly `size` bytes. */
const jsonOfSize = (size: number) => `"${'a'.repeat(size - 2)}"`;

it('request body: 1 MiB is accepted, one byte more is 413 before the handler runs', async () => {
  expect(defaultMaxBodyBytes).toBe(1024 * 1024);
  const before = handled;
  expect(
    (await post(apiPort, { keys: [`b-${randomUUID()}`], body: jsonOfSize(defaultMaxBodyBytes) })).status,
  ).toBe(201);
  const over = await post(apiPort, {
    keys: [`b-${randomUUID()}`],
    body: jsonOfSize(defaultMaxBodyBytes + 1),
  });
  expect(over.status).toBe(413);
  expect(over.headers['content-type']?.[0]).toBe('application/problem+json');
  expect(handled).toBe(before + 1);
});

it('request body: streamed without a length, refused as soon as it passes the limit', async () => {
  const before = handled;
  const chunk = Buffer.alloc(256 * 1024, 0x61);
  const parts: Buffer[] = [Buffer.from('1\r\n"\r\n')];
  for (let i = 0; i < 5; i++)
    parts.push(Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n'));
  parts.push(Buffer.from('1\r\n"\r\n0\r\n\r\n'));
  const response = await rawRequest(
    apiPort,
    [
      'POST /orders HTTP/1.1',
      'Host: 127.0.0.1',
      'Connection: close',
      'Content-Type: application/json',
      'Transfer-Encoding: chunked',
      `Idempotency-Key: s-${randomUUID()}`,
    ],
    Buffer.concat(parts),
  );
  expect(response.status).toBe(413);
  expect(handled).toBe(before);
});

it('key: 255 characters are accepted, 256 are refused (400 key-too-long)', async () => {
  const before = handled;
  const base = randomUUID().replaceAll('-', '');
  expect((await post(apiPort, { keys: [base.padEnd(255, 'k')], body: '{}' })).status).toBe(201);
  const long = await post(apiPort, { keys: [base.padEnd(256, 'k')], body: '{}' });
  expect(long.status).toBe(400);
  expect(JSON.parse(long.body.toString()) as { code: string }).toMatchObject({ code: 'IDEM_KEY_TOO_LONG' });
  expect(handled).toBe(before + 1);
});

it('header section: past 16 KiB the server answers 431 and nothing runs', async () => {
  const before = handled;
  const response = await post(apiPort, {
    keys: [`h-${randomUUID()}`],
    body: '{}',
    extra: [`X-Pad: ${'p'.repeat(16 * 1024)}`],
  });
  expect(response.status).toBe(431);
  expect(handled).toBe(before);
});

it('webhook body: 1 MiB is stored, one byte more is 413 and not stored', async () => {
  const deliver = (body: string) => {
    const id = `msg_${randomUUID()}`;
    const ts = String(Math.floor(Date.now() / 1000));
    const signature = 'v1,' + createHmac('sha256', secret).update(`${id}.${ts}.${body}`).digest('base64');
    return rawRequest(
      hookPort,
      [
        'POST /hooks HTTP/1.1',
        'Host: 127.0.0.1',
        'Connection: close',
        'Content-Type: application/json',
        `Content-Length: ${Buffer.byteLength(body)}`,
        `webhook-id: ${id}`,
        `webhook-timestamp: ${ts}`,
        `webhook-signature: ${signature}`,
      ],
      body,
    );
  };
  const count = async () =>
    (await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".webhook_receipts`))
      .rows[0]!.n;
  const before = await count();
  expect((await deliver(jsonOfSize(1024 * 1024))).status).toBe(202);
  const over = await deliver(jsonOfSize(1024 * 1024 + 1));
  expect(over.status).toBe(413);
  expect(over.headers['content-type']?.[0]).toBe('application/problem+json');
  expect(await count()).toBe(before + 1);
});
