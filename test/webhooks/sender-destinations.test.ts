/**
 * The sender refuses loopback, private, link-local, multicast, unspecified and other
 * special-purpose destinations unless they are allowed: IP literals when an endpoint is created
 * (and again at delivery, for endpoints stored before), host names on the address they resolve to
 * at connect time. A refused delivery fails at once with the reason, no request is made, and an
 * operator sees the reason in the console. Real servers on 127.0.0.1 (which would accept every
 * request), the real resolver for `localhost`, real PostgreSQL.
 */
import { createServer } from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import { consoleDatabase } from '../../src/console/database.js';
import { readWebhooks } from '../../src/console/views/webhooks.js';
import {
  createWebhookSender,
  refusedKind,
  type LookupFunction,
  type WebhookSenderOptions,
} from '../../src/webhooks/index.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { listenNode, standardSecret, type TestServer, resetSender } from './support.js';

let db: TestSchema;
const clock = new ManualClock(Math.floor(Date.now() / 1000) * 1000);
const servers: TestServer[] = [];
let sequence = 0;

/** A real endpoint on 127.0.0.1 that answers `status` (and `headers`) and counts what reaches it. */
async function endpoint(status = 204, headers: Record<string, string> = {}) {
  const seen: string[] = [];
  const server = await listenNode(
    createServer((req, res) => {
      seen.push(req.url ?? '');
      req.resume();
      req.on('end', () => res.writeHead(status, headers).end());
    }),
  );
  servers.push(server);
  return { ...server, port: Number(new URL(server.url).port), seen };
}

function sender(options: Partial<WebhookSenderOptions> = {}) {
  return createWebhookSender({
    sql: fromPg(db.pool),
    schema: db.schema,
    clock,
    breaker: false,
    ...options,
  });
}

const message = () => ({ id: `msg_dest_${++sequence}`, type: 'invoice.paid', payload: { n: sequence } });

beforeAll(async () => {
  db = await createTestSchema();
});
afterEach(async () => {
  await resetSender(db, servers);
});
afterAll(async () => {
  await db?.close();
});

describe('which addresses are refused', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['127.8.9.10', 'loopback'],
    ['::1', 'loopback'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['0.0.0.0', 'unspecified'],
    ['::', 'unspecified'],
    ['10.0.0.7', 'private'],
    ['172.16.5.4', 'private'],
    ['192.168.1.1', 'private'],
    ['100.64.0.1', 'private'],
    ['fd00::1', 'private'],
    ['::ffff:192.168.0.1', 'private'],
    ['64:ff9b::a00:1', 'private'], // NAT64 of 10.0.0.1
    ['2002:c0a8:101::1', 'private'], // 6to4 of 192.168.1.1
    ['169.254.169.254', 'link-local'],
    ['fe80::1', 'link-local'],
    ['224.0.0.251', 'multicast'],
    ['ff02::1', 'multicast'],
    ['255.255.255.255', 'reserved'],
    ['192.0.2.1', 'reserved'],
    ['2001:db8::1', 'reserved'],
  ])('%s is %s', (address, kind) => {
    expect(refusedKind(address)).toBe(kind);
  });

  it.each([
    '8.8.8.8',
    '172.32.0.1',
    '100.128.0.1',
    '2606:4700:4700::1111',
    '::ffff:8.8.8.8',
    '64:ff9b::808:808',
  ])('%s is public', (address) => {
    expect(refusedKind(address)).toBeNull();
  });

  it('refuses an allow-list entry that is neither an address, a CIDR block nor a host name', () => {
    for (const entry of ['10.0.0.0/33', '::/129', 'http://x', 'a b', '1.2.3.4/8/1']) {
      expect(() => sender({ allowedDestinations: [entry] }), entry).toThrow(/allowedDestinations/);
    }
  });
});

describe('endpoints', () => {
  it('cannot be created with a refused IP literal, in any spelling', async () => {
    const s = sender();
    for (const url of [
      'http://127.0.0.1:5432/',
      'http://2130706433/', // 127.0.0.1 as one number
      'http://0x7f.1/',
      'http://[::1]/',
      'http://[::ffff:127.0.0.1]/',
      'http://[::ffff:a00:1]/',
      'http://169.254.169.254/latest/meta-data/',
      'http://10.0.0.7/hooks',
      'http://0.0.0.0/',
      'http://[fe80::1]/',
      'http://224.0.0.1/',
    ]) {
      await expect(s.endpoints.create({ url, secrets: [standardSecret] }), url).rejects.toMatchObject({
        code: 'IDEM_INVALID_ARGUMENT',
        message: expect.stringMatching(/destination refused: .* address/) as unknown,
      });
    }
    const created = await s.endpoints.create({
      url: 'https://hooks.example.com/in',
      secrets: [standardSecret],
    });
    await expect(s.endpoints.update(created.id, { url: 'http://127.0.0.1/' })).rejects.toMatchObject({
      code: 'IDEM_INVALID_ARGUMENT',
    });
    expect((await s.endpoints.list()).map((e) => e.url)).toEqual(['https://hooks.example.com/in']);
  });
});

describe('deliveries', () => {
  it('a name that resolves to loopback fails at once with the reason, and no request is made', async () => {
    const target = await endpoint();
    const s = sender({ breaker: { consecutiveFailures: 1, halfOpenAfterMs: 60_000 } });
    const { id } = await s.endpoints.create({
      url: `http://localhost:${target.port}/hooks`,
      secrets: [standardSecret],
    });
    const [result] = await s.deliver(message());
    expect(result).toMatchObject({ outcome: 'failed', attempt: 1, endpointId: id });
    expect(target.seen).toEqual([]);
    const [delivery] = await s.listDeliveries({ endpointId: id });
    expect(delivery).toMatchObject({ state: 'failed', attempts: 1, lastStatus: null });
    expect(delivery!.lastError).toMatch(
      /destination refused: localhost resolves to (127\.0\.0\.1|::1), a loopback address/,
    );
    const attempts = await s.listAttempts({ messageId: delivery!.messageId });
    expect(attempts).toMatchObject([{ attempt: 1, outcome: 'failed', status: null }]);
    // Not a sign of the endpoint's health: the breaker (one failure opens it) stays closed.
    const [second] = await s.deliver(message());
    expect(second!.outcome).toBe('failed');
  });

  it('an endpoint stored with a loopback address before is refused at delivery', async () => {
    const target = await endpoint();
    const permissive = sender({ allowedDestinations: ['127.0.0.1'] });
    await permissive.endpoints.create({ url: `${target.url}/hooks`, secrets: [standardSecret] });
    const [result] = await sender().deliver(message());
    expect(result!.outcome).toBe('failed');
    expect(target.seen).toEqual([]);
    expect((await sender().listDeliveries())[0]!.lastError).toMatch(
      /destination refused: 127\.0\.0\.1, a loopback/,
    );
  });

  it('checks the address a name resolves to when it connects, and connects to that address', async () => {
    const target = await endpoint();
    const resolved: string[] = [];
    // A customer's name that resolves to an internal address (or is rebound to one after it was registered).
    const lookup: LookupFunction = (hostname, _options, callback) => {
      resolved.push(hostname);
      callback(null, [{ address: '127.0.0.1', family: 4 }]);
    };
    const url = `http://hooks.customer.example:${target.port}/hooks`;
    const refusing = sender({ lookup });
    await refusing.endpoints.create({ url, secrets: [standardSecret] });
    expect((await refusing.deliver(message()))[0]!.outcome).toBe('failed');
    expect(resolved).toEqual(['hooks.customer.example']);
    expect(target.seen).toEqual([]);
    // Allowed, the same name reaches the server the lookup named: the checked address is the one used.
    const allowing = sender({ lookup, allowedDestinations: ['127.0.0.0/8'] });
    expect((await allowing.deliver(message()))[0]).toMatchObject({ outcome: 'delivered', status: 204 });
    expect(target.seen).toEqual(['/hooks']);
    await allowing.stop();
  });

  it('allows by host name, whatever it resolves to', async () => {
    const target = await endpoint();
    const s = sender({ allowedDestinations: ['LocalHost'] });
    await s.endpoints.create({ url: `http://localhost:${target.port}/in`, secrets: [standardSecret] });
    expect((await s.deliver(message()))[0]).toMatchObject({ outcome: 'delivered', status: 204 });
    expect(target.seen).toEqual(['/in']);
    await s.stop();
  });

  it('never follows a redirect, so a 3xx cannot lead it to another address', async () => {
    const inside = await endpoint();
    // The redirect names a server the sender could reach: it still does not go there.
    const redirecting = await listenNode(
      createServer((req, res) => {
        req.resume();
        res.writeHead(307, { location: `${inside.url}/internal` }).end();
      }),
    );
    servers.push(redirecting);
    const s = sender({ allowedDestinations: ['127.0.0.1'] });
    await s.endpoints.create({ url: `${redirecting.url}/in`, secrets: [standardSecret] });
    const [result] = await s.deliver(message());
    expect([result!.outcome, result!.status]).toEqual(['retry', 307]);
    expect(inside.seen).toEqual([]);
    await s.stop();
  });

  it('a custom fetch is never called for a refused IP literal', async () => {
    let calls = 0;
    const permissive = sender({ allowedDestinations: ['10.0.0.0/8'] });
    await permissive.endpoints.create({ url: 'http://10.1.2.3/hooks', secrets: [standardSecret] });
    const s = sender({
      fetch: async () => {
        calls++;
        return new Response(null, { status: 204 });
      },
    });
    expect((await s.deliver(message()))[0]!.outcome).toBe('failed');
    expect(calls).toBe(0);
  });

  it('shows a refused delivery and its reason to the operator in the console', async () => {
    const target = await endpoint();
    const s = sender();
    await s.endpoints.create({ url: `http://localhost:${target.port}/hooks`, secrets: [standardSecret] });
    const m = message();
    await s.deliver(m);
    const view = await readWebhooks(
      consoleDatabase({ sql: fromPg(db.pool), schema: db.schema }, clock, 5000),
      {},
    );
    expect(view.deliveries.counts).toEqual({ failed: 1 });
    expect(view.failedDeliveries).toEqual([
      expect.objectContaining({
        messageId: m.id,
        state: 'failed',
        lastStatus: null,
        lastError: expect.stringMatching(
          /destination refused: localhost resolves to .*loopback address/,
        ) as unknown,
      }),
    ]);
  });
});
