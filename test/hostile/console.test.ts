/**
 * The operator console, as the demo serves it (its own pool), against what an attacker tried
 * (issue 15): cross-site reads and live streams through an operator's browser, parameters that
 * used to reach the database unchecked (impossible cursor dates, NUL, `olderThan=999999999d`),
 * prototype names as asset names, and live streams without end. Each is refused with a 4xx
 * problem that names what was wrong, no database text is ever echoed, and nothing changes.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consolePlugin } from 'idem/console';
import { encodeCursor } from '../../src/console/params.js';
import { createTestSchema } from '../support/database.js';
import { startHostileDemo, type HostileDemo } from '../support/hostile/demo.js';

let h: HostileDemo;
beforeAll(async () => {
  h = await startHostileDemo();
});
afterAll(() => h?.close());

interface Answer {
  status: number;
  type: string;
  body: string;
  json: Record<string, unknown>;
}

/** A console request; answers of event streams are cut after their first bytes. */
function consoleRequest(
  base: string,
  path: string,
  options: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${base}${path}`,
      { method: options.method ?? 'GET', headers: options.headers },
      (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        const type = String(res.headers['content-type'] ?? '');
        const done = () => {
          const body = Buffer.concat(chunks).toString('utf8');
          let json: Record<string, unknown> = {};
          try {
            json = JSON.parse(body) as Record<string, unknown>;
          } catch {
            // not JSON (the page, an asset, an event stream)
          }
          resolve({ status: res.statusCode ?? 0, type, body, json });
        };
        res.on('data', (chunk: Buffer) => {
          chunks.push(chunk);
          if (type.startsWith('text/event-stream')) {
            res.destroy();
            done();
          }
        });
        res.on('end', done);
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

const get = (path: string, headers: Record<string, string> = {}) =>
  consoleRequest(h.demo.url, `/console${path}`, { headers });

/** Refused with `status`, a console problem, the parameter named; nothing stored or changed. */
async function expectRefused(
  send: () => Promise<Answer>,
  status: number,
  parameter?: string,
): Promise<Answer> {
  const before = await h.counts();
  const answer = await send();
  expect(answer.status, answer.body).toBe(status);
  expect(answer.type).toMatch(/^application\/problem\+json/);
  expect(answer.json).toMatchObject({ type: `urn:idem:console:${status}`, status });
  if (parameter !== undefined) {
    expect(answer.json['invalid-params']).toEqual([
      { name: parameter, reason: expect.any(String) as unknown },
    ]);
    expect(answer.json.detail).toContain(parameter);
  }
  expect(answer.body).not.toMatch(
    /relation|syntax|invalid input|out of range|22[0-9A-Z]{3}|\bat .*\.[jt]s:\d+/i,
  );
  expect(await h.counts()).toEqual(before);
  return answer;
}

describe('cross-site requests are refused on every endpoint, reads and the live stream too', () => {
  const endpoints = [
    '/api/summary',
    '/api/requests',
    '/api/requests/detail?tenant=a&operation=b&key=c',
    '/api/outbox',
    '/api/inbox',
    '/api/webhooks',
    '/api/tasks',
    '/api/sagas',
    '/api/live',
    '/assets/console.js',
    '',
  ];
  const foreign: [string, Record<string, string>][] = [
    ['Sec-Fetch-Site: cross-site', { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'cors' }],
    ['Sec-Fetch-Site: same-site (another port)', { 'sec-fetch-site': 'same-site', 'sec-fetch-mode': 'cors' }],
    ['a foreign Origin', { origin: 'https://evil.example' }],
    ['Origin: null (a sandboxed frame)', { origin: 'null' }],
    ['an Origin on another port', { origin: 'http://127.0.0.1:1' }],
  ];
  it.each(endpoints)('%s', async (path) => {
    for (const [what, headers] of foreign) {
      const answer = await expectRefused(() => get(path, headers), 403);
      expect(answer.json.detail, what).toMatch(/cross-(site|origin) request refused/);
    }
    // The console's own page asking: served (an event stream for /api/live).
    const own = await get(path, { 'sec-fetch-site': 'same-origin', origin: h.demo.url });
    expect(own.status).toBe(path.startsWith('/api/requests/detail') ? 404 : 200); // no such request
  });

  it('redrive too', async () => {
    const answer = await expectRefused(
      () =>
        consoleRequest(h.demo.url, '/console/api/outbox/redrive', {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'x-idem-console': '1',
            'sec-fetch-site': 'cross-site',
          },
          body: '{"all":true}',
        }),
      403,
    );
    expect(answer.json.detail).toMatch(/cross-site/);
  });

  it('a top-level navigation to the page from a link elsewhere opens it (the page holds no data)', async () => {
    const page = await get('', {
      'sec-fetch-site': 'cross-site',
      'sec-fetch-mode': 'navigate',
      'sec-fetch-dest': 'document',
    });
    expect(page.status).toBe(200);
    expect(page.type).toMatch(/^text\/html/);
    // The same navigation headers do not open the API.
    await expectRefused(
      () =>
        get('/api/requests', {
          'sec-fetch-site': 'cross-site',
          'sec-fetch-mode': 'navigate',
          'sec-fetch-dest': 'document',
        }),
      403,
    );
  });
});

describe('every parameter is validated, by name', () => {
  const cursor = (createdAt: string, key = 'k') =>
    encodeCursor({ createdAt, tenant: 'acme', operation: 'POST /v1/payments', key });
  it.each([
    ['/api/requests?cursor=' + cursor('2024-13-45 99:99:99+00'), 'cursor'],
    ['/api/requests?cursor=' + cursor('2024-02-30 10:00:00+00'), 'cursor'],
    ['/api/requests?cursor=' + cursor('2024-01-01 10:00:00+00', 'a\u0000b'), 'cursor'],
    ['/api/requests?cursor=' + cursor('now(); --'), 'cursor'],
    ['/api/requests?cursor=%00', 'cursor'],
    ['/api/requests?cursor=not-base64-json', 'cursor'],
    ['/api/requests?olderThan=999999999d', 'olderThan'],
    ['/api/requests?newerThan=9999999999', 'newerThan'],
    ['/api/requests?olderThan=-1m', 'olderThan'],
    ['/api/requests?limit=1e2', 'limit'],
    ['/api/requests?limit=0x10', 'limit'],
    ['/api/requests?limit=501', 'limit'],
    ['/api/requests?limit=0', 'limit'],
    ['/api/requests?state=everything', 'state'],
    ['/api/requests?tenant=a%00b', 'tenant'],
    ['/api/requests?tenant=a&tenant=b', 'tenant'],
    ['/api/requests?operation=' + 'o'.repeat(256), 'operation'],
    ['/api/requests?sort=tenant_id', 'sort'],
    ['/api/requests/detail?tenant=acme&operation=x', 'key'],
    ['/api/requests/detail?tenant=acme&operation=x&key=%00', 'key'],
    ['/api/outbox?topic=%00', 'topic'],
    ['/api/inbox?consumer=a%0Ab', 'consumer'],
    ['/api/webhooks?source=%00', 'source'],
    ['/api/tasks?queue=%00', 'queue'],
    ['/api/sagas?saga=%00', 'saga'],
    ['/api/summary?x=1', 'x'],
    ['/api/live?x=1', 'x'],
  ])('%s: 400 naming %s', async (path, parameter) => {
    await expectRefused(() => get(path), 400, parameter);
  });

  it('redrive: unknown fields, control characters, a non-boolean `all`', async () => {
    const redrive = (body: string) =>
      consoleRequest(h.demo.url, '/console/api/outbox/redrive', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-idem-console': '1' },
        body,
      });
    await expectRefused(() => redrive('{"topic":"payments","where":"1=1"}'), 400, 'where');
    await expectRefused(() => redrive('{"topic":"pay\\u0000ments"}'), 400, 'topic');
    await expectRefused(() => redrive('{"all":"yes"}'), 400, 'all');
    await expectRefused(() => redrive('{"id":"not-a-uuid"}'), 400);
  });
});

describe('assets', () => {
  it.each(['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', '%00', '..%2Findex.html'])(
    '/console/assets/%s: 404 (was a 500 for prototype names)',
    async (name) => {
      await expectRefused(() => get(`/assets/${name}`), 404);
    },
  );
});

describe('live streams are capped', () => {
  it('per client: the ninth stream from one address is refused, and a closed one frees its place', async () => {
    const opened: IncomingMessage[] = [];
    const open = () =>
      new Promise<IncomingMessage>((resolve, reject) => {
        httpRequest(`${h.demo.url}/console/api/live`, (res) => resolve(res))
          .on('error', reject)
          .end();
      });
    try {
      for (let i = 0; i < 8; i++) {
        const res = await open();
        expect(res.statusCode).toBe(200);
        opened.push(res);
      }
      const refused = await expectRefused(() => get('/api/live'), 429);
      expect(refused.json.detail).toMatch(/8 live streams/);
      opened.pop()!.destroy();
      await new Promise((resolve) => setTimeout(resolve, 200));
      const again = await open();
      expect(again.statusCode).toBe(200);
      opened.push(again);
    } finally {
      for (const res of opened) res.destroy();
    }
  });

  it('in total', async () => {
    const db = await createTestSchema({ poolSize: 2 });
    const app = Fastify();
    await app.register(consolePlugin, {
      pool: db.pool,
      schema: db.schema,
      maxLivePerClient: 100,
      maxLiveTotal: 3,
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    try {
      for (let i = 0; i < 3; i++) expect((await consoleRequest(base, '/console/api/live')).status).toBe(200);
      // The first three were cut by the client; wait until the server noticed, then hold three open.
      await new Promise((resolve) => setTimeout(resolve, 200));
      const held: IncomingMessage[] = [];
      for (let i = 0; i < 3; i++) {
        held.push(
          await new Promise<IncomingMessage>((resolve) =>
            httpRequest(`${base}/console/api/live`, resolve).end(),
          ),
        );
      }
      const fourth = await consoleRequest(base, '/console/api/live');
      expect(fourth.status).toBe(429);
      expect(fourth.json.detail).toMatch(/3 live streams/);
      for (const res of held) res.destroy();
    } finally {
      await app.close();
      await db.close();
    }
  });
});

describe('database errors', () => {
  it('are logged, never echoed: the answer says where to look, not what the database said', async () => {
    const db = await createTestSchema({ poolSize: 2 });
    const logged: string[] = [];
    const app = Fastify({
      logger: { level: 'error', stream: { write: (line: string) => void logged.push(line) } },
    });
    // A schema without idem's tables: every read fails in PostgreSQL.
    await app.register(consolePlugin, { pool: db.pool, schema: 'idem_nothing_here' });
    try {
      for (const path of ['/console/api/summary', '/console/api/requests', '/console/api/outbox']) {
        const answer = await app.inject({ method: 'GET', url: path, headers: { host: '127.0.0.1' } });
        expect(answer.statusCode).toBe(500);
        expect(answer.json()).toEqual({
          type: 'urn:idem:console:500',
          title: 'Console error',
          status: 500,
          detail: 'the console could not read the database (see the server log)',
        });
        expect(answer.body).not.toMatch(/idem_nothing_here|relation|does not exist/);
      }
      expect(logged.join('\n')).toMatch(/idem_nothing_here.*does not exist/);
    } finally {
      await app.close();
      await db.close();
    }
  });
});
