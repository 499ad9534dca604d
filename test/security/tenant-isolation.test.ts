/**
 * Tenant isolation through the public APIs, table by table. Two tenants use the same key (or id)
 * for different intents; neither may read, replay, be refused by, or dedupe against the other's
 * record. Where a table has no tenant (inbox, webhook receipts), its own scope (the consumer, the
 * webhook source) is the boundary and is tested the same way. The operator console's views,
 * filtered by tenant, show that tenant's rows only.
 */
import { createHmac, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createClaims } from 'idem/claims';
import { consolePlugin } from 'idem/console';
import { idempotency as nodeIdempotency } from 'idem/node-http';
import { createInbox } from 'idem/inbox';
import { createIdem, type Idem } from 'idem';
import { createOutbox } from 'idem/outbox';
import { createStandardWebhooksVerifier, createWebhookReceiver, recordHeaders } from 'idem/webhooks';
import { createSagas, defineSaga, isSagaStuck, step } from 'idem/workflow';
import { createTestSchema, type TestSchema } from '../support/database.js';

let db: TestSchema;
let idem: Idem;

beforeAll(async () => {
  db = await createTestSchema();
  await db.pool.query(
    `CREATE TABLE "${db.schema}".effects (tenant text NOT NULL, key text NOT NULL, what text NOT NULL)`,
  );
  idem = createIdem({ sql: fromPg(db.pool), schema: db.schema });
});
afterAll(() => db.close());

const effects = async (key: string) =>
  (
    await db.pool.query<{ tenant: string; what: string }>(
      `SELECT tenant, what FROM "${db.schema}".effects WHERE key = $1 ORDER BY tenant`,
      [key],
    )
  ).rows;

describe('requests', () => {
  it('the same key under two tenants is two intents: no replay, no key-reuse refusal, no shared row', async () => {
    const key = `shared-${randomUUID()}`;
    const run = (tenant: string, amount: number) =>
      idem.run({ tenant, operation: 'pay', key, request: { amount } }, async (tx) => {
        await tx.query(`INSERT INTO "${db.schema}".effects VALUES ($1, $2, $3)`, [
          tenant,
          key,
          `pay ${amount}`,
        ]);
        return { tenant, amount };
      });
    // Another payload under the same key: for tenant B this is simply its own first request. Each
    // tenant's second run replays its own first.
    for (const replayed of [false, true]) {
      for (const [tenant, amount] of [
        ['tenant_a', 100],
        ['tenant_b', 999],
      ] as const) {
        expect(await run(tenant, amount)).toMatchObject({ replayed, value: { tenant, amount } });
      }
    }
    expect(await effects(key)).toEqual([
      { tenant: 'tenant_a', what: 'pay 100' },
      { tenant: 'tenant_b', what: 'pay 999' },
    ]);
    expect((await idem.get({ tenant: 'tenant_b', operation: 'pay', key }))?.result).toContain('999');
    expect(await idem.get({ tenant: 'tenant_c', operation: 'pay', key })).toBeNull();
  });

  it("over HTTP: tenant B with tenant A's key and identical body never receives A's stored response", async () => {
    let served = 0;
    const handler = nodeIdempotency({
      ...// The tenant comes from authentication; here a bearer token names it.
      {
        idem,
        tenant: (req) => /^Bearer (\w+)$/.exec(req.headers.authorization ?? '')?.[1],
        route: '/orders',
      },
      handler: async (req, res) => {
        served++;
        const body = JSON.stringify({
          order: `${req.idem!.tenant}-${served}`,
          secret: `${req.idem!.tenant}-private`,
        });
        res.writeHead(201, { 'content-type': 'application/json' }).end(body);
      },
    });
    const server: Server = createServer((req, res) => void handler(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/orders`;
    try {
      const key = `http-${randomUUID()}`;
      const post = (tenant: string) =>
        fetch(url, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${tenant}`,
            'idempotency-key': key,
            'content-type': 'application/json',
          },
          body: '{"amount":5}',
        });
      const a = await post('tenant_a');
      const aBody = await a.text();
      const b = await post('tenant_b');
      const bBody = await b.text();
      expect([a.status, b.status]).toEqual([201, 201]);
      expect(b.headers.get('idempotent-replayed')).toBeNull();
      expect(bBody).not.toContain('tenant_a');
      const aAgain = await post('tenant_a');
      expect(aAgain.headers.get('idempotent-replayed')).toBe('true');
      expect(await aAgain.text()).toBe(aBody);
      expect(served).toBe(2);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe('steps', () => {
  it("a multi-step operation never resumes from another tenant's recorded steps; derived keys differ", async () => {
    const key = `steps-${randomUUID()}`;
    const seen: { tenant: string; downstreamKey: string }[] = [];
    const run = (tenant: string) =>
      idem.steps({ tenant, operation: 'checkout', key, request: {} }, async (op) => {
        const charged = await op.step('charge', async (tx, { key: downstreamKey }) => {
          seen.push({ tenant, downstreamKey });
          await tx.query(`INSERT INTO "${db.schema}".effects VALUES ($1, $2, 'charge')`, [tenant, key]);
          return { by: tenant };
        });
        return charged;
      });
    expect((await run('tenant_a')).value).toEqual({ by: 'tenant_a' });
    expect((await run('tenant_b')).value).toEqual({ by: 'tenant_b' });
    expect(seen.map((s) => s.tenant)).toEqual(['tenant_a', 'tenant_b']);
    expect(seen[0]!.downstreamKey).not.toBe(seen[1]!.downstreamKey);
    const { rows } = await db.pool.query(
      `SELECT tenant_id, result FROM "${db.schema}".steps WHERE idempotency_key = $1 ORDER BY tenant_id`,
      [key],
    );
    expect(rows).toEqual([
      { tenant_id: 'tenant_a', result: '{"by":"tenant_a"}' },
      { tenant_id: 'tenant_b', result: '{"by":"tenant_b"}' },
    ]);
  });
});

describe('tasks (claims)', () => {
  it("the same dedupe key under two tenants is two tasks; neither sees the other's payload", async () => {
    const claims = createClaims({ sql: fromPg(db.pool), schema: db.schema });
    const key = `task-${randomUUID()}`;
    const a = await claims.enqueue({
      tenant: 'tenant_a',
      queue: 'emails',
      key,
      payload: { to: 'a@example.test' },
    });
    // Another payload under the same key would be a KeyReusedError within one tenant; across, it is new.
    const b = await claims.enqueue({
      tenant: 'tenant_b',
      queue: 'emails',
      key,
      payload: { to: 'b@example.test' },
    });
    expect([a.created, b.created]).toEqual([true, true]);
    expect(b.task.id).not.toBe(a.task.id);
    expect(b.task.payload).toEqual({ to: 'b@example.test' });
    const again = await claims.enqueue({
      tenant: 'tenant_b',
      queue: 'emails',
      key,
      payload: { to: 'b@example.test' },
    });
    expect(again).toMatchObject({ created: false, task: { id: b.task.id } });
  });
});

describe('sagas', () => {
  it("the same saga key under two tenants is two sagas: no replay of the other's result", async () => {
    const sagas = createSagas({ sql: fromPg(db.pool), schema: db.schema });
    const saga = defineSaga<{ amount: number }>({
      name: 'transfer',
      steps: [
        step({
          name: 'debit',
          action: async ({ input, saga }) => ({ debited: input.amount, tenant: saga.tenant }),
        }),
      ],
    });
    const key = `saga-${randomUUID()}`;
    const a = await sagas.run(saga, { tenant: 'tenant_a', key, input: { amount: 10 } });
    const b = await sagas.run(saga, { tenant: 'tenant_b', key, input: { amount: 77 } });
    expect(a).toMatchObject({ replayed: false, value: { debit: { debited: 10, tenant: 'tenant_a' } } });
    expect(b).toMatchObject({ replayed: false, value: { debit: { debited: 77, tenant: 'tenant_b' } } });
  });
});

describe('inbox (scoped by consumer) and outbox', () => {
  it('one message id processed by one consumer is not a duplicate for another', async () => {
    const inbox = createInbox({ sql: fromPg(db.pool), schema: db.schema });
    const id = `evt-${randomUUID()}`;
    const handled: string[] = [];
    for (const consumer of ['ledger_a', 'ledger_b', 'ledger_a']) {
      await inbox.handle({ consumer, messageId: id }, async () => {
        handled.push(consumer);
      });
    }
    expect(handled).toEqual(['ledger_a', 'ledger_b']);
  });

  it("events carry their tenant in the payload, written in the tenant's own transaction", async () => {
    const outbox = createOutbox({ schema: db.schema });
    for (const tenant of ['tenant_a', 'tenant_b']) {
      await fromPg(db.pool).transaction((tx) =>
        outbox.add(tx, { topic: 'isolation', key: `order-1`, type: 'order.created', payload: { tenant } }),
      );
    }
    const { rows } = await db.pool.query<{ payload: { tenant: string } }>(
      `SELECT payload FROM "${db.schema}".outbox WHERE aggregatetype = 'isolation' ORDER BY seq`,
    );
    expect(rows.map((r) => r.payload.tenant)).toEqual(['tenant_a', 'tenant_b']);
  });
});

describe('webhook receipts (scoped by source)', () => {
  const secretA = 'whsec_' + Buffer.from('source-a-secret-source-a-secret!').toString('base64');
  const secretB = 'whsec_' + Buffer.from('source-b-secret-source-b-secret!').toString('base64');
  const sign = (secret: string, id: string, ts: string, body: string) =>
    'v1,' +
    createHmac('sha256', Buffer.from(secret.slice(6), 'base64'))
      .update(`${id}.${ts}.${body}`)
      .digest('base64');

  it('a delivery signed for source A is refused at source B; the same delivery id under each source is two receipts', async () => {
    const receiver = createWebhookReceiver({
      sql: fromPg(db.pool),
      schema: db.schema,
      sources: {
        source_a: createStandardWebhooksVerifier({ secrets: [secretA] }),
        source_b: createStandardWebhooksVerifier({ secrets: [secretB] }),
      },
    });
    const id = `msg_${randomUUID()}`;
    const ts = String(Math.floor(Date.now() / 1000));
    const body = '{"type":"ping"}';
    const headers = (secret: string) =>
      recordHeaders({
        'webhook-id': id,
        'webhook-timestamp': ts,
        'webhook-signature': sign(secret, id, ts, body),
      });
    const bytes = Buffer.from(body);
    expect((await receiver.receive('source_b', { headers: headers(secretA), body: bytes })).status).toBe(401);
    expect((await receiver.receive('source_a', { headers: headers(secretA), body: bytes })).status).toBe(202);
    // B's own delivery with the same id is B's first, not a duplicate of A's.
    expect((await receiver.receive('source_b', { headers: headers(secretB), body: bytes })).status).toBe(202);
    expect((await receiver.receive('source_a', { headers: headers(secretA), body: bytes })).status).toBe(200);
    const { rows } = await db.pool.query(
      `SELECT source FROM "${db.schema}".webhook_receipts WHERE delivery_id = $1 ORDER BY source`,
      [id],
    );
    expect(rows).toEqual([{ source: 'source_a' }, { source: 'source_b' }]);
  });
});

describe('console views filtered by tenant', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = Fastify({ logger: false });
    await app.register(consolePlugin, { pool: db.pool, schema: db.schema, host: '127.0.0.1' });
    await app.ready();
  });
  afterAll(() => app.close());
  const view = async <T>(path: string) => {
    const response = await app.inject({
      method: 'GET',
      url: `/console/api/${path}`,
      remoteAddress: '127.0.0.1',
    });
    expect(response.statusCode, response.body).toBe(200);
    return response.json<T>();
  };

  it("requests: a tenant's list and detail hold only its rows", async () => {
    const key = `console-${randomUUID()}`;
    for (const tenant of ['tenant_a', 'tenant_b']) {
      await idem.run({ tenant, operation: 'console-op', key, request: { tenant } }, async () => ({ tenant }));
    }
    const list = await view<{ rows: { tenant: string; key: string }[] }>(
      `requests?tenant=tenant_a&limit=500`,
    );
    expect(list.rows.length).toBeGreaterThan(0);
    expect(list.rows.every((r) => r.tenant === 'tenant_a')).toBe(true);
    const detail = await view<{ tenant: string }>(
      `requests/detail?tenant=tenant_b&operation=console-op&key=${encodeURIComponent(key)}`,
    );
    expect(JSON.stringify(detail)).not.toContain('"tenant_a"');
  });

  it('tasks and sagas: dead tasks and stuck sagas of one tenant only', async () => {
    const claims = createClaims({ sql: fromPg(db.pool), schema: db.schema });
    const sagas = createSagas({
      sql: fromPg(db.pool),
      schema: db.schema,
      compensationAttempts: 1,
      backoff: { baseMs: 1, maxMs: 2 },
    });
    const saga = defineSaga<{ n: number }>({
      name: 'doomed',
      steps: [
        step({
          name: 'one',
          action: async () => 1,
          compensate: async () =>
            Promise.reject(Object.assign(new Error('undo failed'), { retryable: false })),
        }),
        step({
          name: 'two',
          action: async () => Promise.reject(Object.assign(new Error('declined'), { retryable: false })),
        }),
      ],
    });
    for (const tenant of ['tenant_a', 'tenant_b']) {
      await claims.enqueue({
        tenant,
        queue: 'console-q',
        key: `dead-${randomUUID()}`,
        payload: { tenant },
        maxAttempts: 1,
      });
      const [task] = await claims.claim('console-q');
      await claims.fail(task!, new Error('gone'), { retryable: false });
      const error = await sagas
        .run(saga, { tenant, key: `stuck-${randomUUID()}`, input: { n: 1 } })
        .catch((e: unknown) => e);
      expect(isSagaStuck(error)).toBe(true);
    }
    const tasks = await view<{ dead: { tenant: string }[] }>('tasks?tenant=tenant_b');
    expect(tasks.dead.length).toBeGreaterThan(0);
    expect(tasks.dead.every((t) => t.tenant === 'tenant_b')).toBe(true);
    const stuck = await view<{ stuck: { tenant: string }[] }>('sagas?tenant=tenant_a');
    expect(stuck.stuck.length).toBeGreaterThan(0);
    expect(stuck.stuck.every((s) => s.tenant === 'tenant_a')).toBe(true);
  });
});
