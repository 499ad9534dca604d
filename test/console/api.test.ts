/**
 * The console's JSON API over a schema filled by idem's real APIs: what an operator reads is what
 * the tables hold, filters are exact, secrets never leave the server, and redrive really revives.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Fastify from 'fastify';
import { fromPg } from '../../src/adapters/pg.js';
import { systemClock } from '../../src/core/clock.js';
import { consoleDatabase } from '../../src/console/database.js';
import { consolePlugin } from '../../src/console/plugin.js';
import type { ConsoleSummary, RequestDetail, RequestList } from '../../src/console/index.js';
import type { OutboxView } from '../../src/console/views/outbox.js';
import type { InboxView } from '../../src/console/views/inbox.js';
import type { WebhooksView } from '../../src/console/views/webhooks.js';
import type { TasksView } from '../../src/console/views/tasks.js';
import type { SagasView } from '../../src/console/views/sagas.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { hostileBody, populate, startConsole, type ConsoleServer, type Populated } from './support.js';

describe('console API', () => {
  let db: TestSchema;
  let data: Populated;
  let server: ConsoleServer;

  beforeAll(async () => {
    db = await createTestSchema();
    data = await populate(db.pool, db.schema);
    server = await startConsole({ pool: db.pool, schema: db.schema, liveIntervalMs: 100 });
  });
  afterAll(async () => {
    await server?.close();
    await data?.finish();
    await db?.close();
  });

  async function get<T>(
    path: string,
    params: Record<string, string> = {},
  ): Promise<{ status: number; body: T; text: string }> {
    const query = new URLSearchParams(params).toString();
    const res = await fetch(`${server.url}/api/${path}${query ? `?${query}` : ''}`);
    const text = await res.text();
    return { status: res.status, body: JSON.parse(text) as T, text };
  }

  /** One request's detail, by its tenant, operation and key. */
  async function requestDetail(scope: Record<string, string>): Promise<RequestDetail> {
    return (await get<RequestDetail>('requests/detail', scope)).body;
  }

  it('counts what needs an operator in one summary', async () => {
    const { body } = await get<ConsoleSummary>('summary');
    expect(body.requests).toEqual({ pending: 2, stuck: 1 });
    expect(body.outbox).toMatchObject({ backlog: 2, retrying: 1, dead: 1 });
    expect(body.outbox.lagMs).toBeGreaterThan(39 * 60_000);
    expect(body.inbox).toEqual({ dead: 1 });
    expect(body.receipts).toMatchObject({ backlog: 0, dead: 1, superseded: 1, stuck: 0, parked: 1 });
    expect(body.tasks).toEqual({ ready: 1, claimed: 1, stuck: 1, dead: 1 });
    expect(body.sagas).toEqual({ running: 0, stuck: 1, stalled: 0 });
  });

  it('lists keyed requests newest first and marks the crashed one stuck', async () => {
    const { body } = await get<RequestList>('requests');
    expect(body.rows).toHaveLength(8);
    expect(body.next).toBeNull();
    const created = body.rows.map((r) => Date.parse(r.createdAt!));
    expect(created).toEqual([...created].sort((a, b) => b - a));
    const stuck = body.rows.filter((r) => r.stuck);
    expect(stuck.map((r) => [r.tenant, r.operation, r.key, r.recoveryPoint])).toEqual([
      ['acme', 'refund-payment', 'refund-7', 'reserve'],
    ]);
    const running = body.rows.find((r) => r.key === data.running.key)!;
    expect(running).toMatchObject({ state: 'pending', stuck: false, recoveryPoint: 'collect' });
    expect(Date.parse(running.lockedUntil!)).toBeGreaterThan(Date.now());
    expect(body.rows.find((r) => r.key === 'image-1')).toMatchObject({ status: 201, bodyBytes: 12 });
  });

  it('filters requests by exact tenant, operation, state and age', async () => {
    const byTenant = (await get<RequestList>('requests', { tenant: 'acme' })).body.rows;
    expect(byTenant).toHaveLength(5);
    expect(new Set(byTenant.map((r) => r.tenant))).toEqual(new Set(['acme'])); // not acme_eu
    expect((await get<RequestList>('requests', { tenant: 'acme_eu' })).body.rows.map((r) => r.key)).toEqual([
      'order-1001',
    ]);
    // Parameterised, exact: patterns and injection attempts match nothing.
    for (const tenant of ["acme' OR '1'='1", 'acme%', 'acm_', 'ACME']) {
      const res = await get<RequestList>('requests', { tenant });
      expect(res.status).toBe(200);
      expect(res.body.rows).toEqual([]);
    }
    const payments = (await get<RequestList>('requests', { operation: 'POST /v1/payments' })).body.rows;
    expect(payments.map((r) => `${r.tenant}/${r.key}`).sort()).toEqual([
      'acme/order-1001',
      'acme/order-1002',
      'acme/order-1003',
      'acme_eu/order-1001',
    ]);
    expect(
      (await get<RequestList>('requests', { state: 'pending' })).body.rows.map((r) => r.key).sort(),
    ).toEqual(['export-2024-06', 'refund-7']);
    expect((await get<RequestList>('requests', { state: 'stuck' })).body.rows.map((r) => r.key)).toEqual([
      'refund-7',
    ]);
    expect((await get<RequestList>('requests', { state: 'failed' })).body.rows).toEqual([]);
    // Writers ran 40 minutes behind the wall clock, except the running export.
    expect((await get<RequestList>('requests', { newerThan: '30m' })).body.rows.map((r) => r.key)).toEqual([
      'export-2024-06',
    ]);
    expect((await get<RequestList>('requests', { olderThan: '30m' })).body.rows).toHaveLength(7);
    expect((await get<RequestList>('requests', { olderThan: '2h' })).body.rows).toHaveLength(0);
    expect(
      (await get<RequestList>('requests', { tenant: 'acme', state: 'stuck', olderThan: '10m' })).body.rows,
    ).toHaveLength(1);
  });

  it('pages with a keyset cursor: every row once, in order', async () => {
    const all = (await get<RequestList>('requests')).body.rows.map(
      (r) => `${r.tenant}/${r.operation}/${r.key}`,
    );
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 10; page++) {
      const params: Record<string, string> = { limit: '3', ...(cursor ? { cursor } : {}) };
      const { body } = await get<RequestList>('requests', params);
      expect(body.rows.length).toBeLessThanOrEqual(3);
      seen.push(...body.rows.map((r) => `${r.tenant}/${r.operation}/${r.key}`));
      cursor = body.next;
      if (!cursor) break;
    }
    expect(seen).toEqual(all);
  });

  it('refuses malformed filters with 400 problem+json', async () => {
    const malformed: Record<string, string>[] = [
      { state: 'sleeping' },
      { olderThan: '5 minutes' },
      { limit: '0' },
      { limit: '100000' },
      { cursor: 'bm90LWEtY3Vyc29y' },
      { tenant: 'a\u0000b' },
    ];
    for (const params of malformed) {
      const res = await fetch(`${server.url}/api/requests?${new URLSearchParams(params).toString()}`);
      expect(res.status, JSON.stringify(params)).toBe(400);
      expect(res.headers.get('content-type')).toContain('application/problem+json');
    }
  });

  it('opens a request: stored response decoded, sensitive headers redacted, steps listed', async () => {
    const { status, body, text } = await get<RequestDetail>('requests/detail', {
      tenant: 'acme',
      operation: 'POST /v1/payments',
      key: 'order-1001',
    });
    expect(status).toBe(200);
    expect(body.state).toBe('completed');
    expect(body.fingerprint).toMatch(/^[0-9a-f]{64}$/);
    expect(body.lease).toBe('none');
    expect(body.response!.status).toBe(201);
    expect(body.response!.headers).toEqual([
      ['location', '/v1/payments/pay_c0'],
      ['set-cookie', '[redacted]'],
      ['x-response-signature', '[redacted]'],
      ['content-type', 'application/json; charset=utf-8'],
    ]);
    expect(body.body).toMatchObject({ encoding: 'utf8', bytes: 70, truncated: false });
    expect(JSON.parse(body.body!.text)).toEqual({
      id: 'pay_c0',
      amount: 1000,
      charge_id: 'ch_c0',
      status: 'succeeded',
    });
    expect(body.resource).toEqual({ type: 'location', id: '/v1/payments/pay_c0' });
    expect(body.steps.map((s) => s.step).sort()).toEqual(['charge', 'record-payment']);
    expect(JSON.parse(body.steps.find((s) => s.step === 'charge')!.result!.text)).toEqual({
      chargeId: 'ch_c0',
    });
    // Nowhere in the answer, not even in the raw result.
    expect(text).not.toContain('abc123');
    expect(text).not.toContain('sig-must-not-show');
  });

  it('shows the crashed operation with its lapsed lease, fence and recovery point', async () => {
    const body = await requestDetail(data.crashed);
    expect(body).toMatchObject({
      state: 'pending',
      stuck: true,
      lease: 'lapsed',
      fence: 1,
      recoveryPoint: 'reserve',
      result: null,
      body: null,
    });
    expect(body.leaseRemainingMs!).toBeLessThan(-39 * 60_000);
    expect(body.steps.map((s) => [s.step, JSON.parse(s.result!.text) as unknown])).toEqual([
      ['reserve', { reservation: 'res_1' }],
    ]);
  });

  it('shows what the completer did with a pending defined operation, and null for others', async () => {
    expect((await requestDetail(data.crashed)).completion).toBeNull();
    const { fromPg } = await import('../../src/adapters/pg.js');
    const { createIdem } = await import('../../src/operations/idem.js');
    const { createCompleter } = await import('../../src/operations/completer.js');
    const { ManualClock } = await import('../../src/core/clock.js');
    const clock = new ManualClock(Date.now());
    const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: 1000 });
    const ship = idem.define('ship-order', async (op) =>
      op.call('carrier', async () => {
        throw Object.assign(new Error('carrier down'), { retryable: true });
      }),
    );
    const scope = { tenant: 'acme', operation: 'ship-order', key: 'ship-1' };
    await ship.run({ tenant: 'acme', key: 'ship-1', input: { order: 1 } }).catch(() => undefined);
    clock.advance(1000);
    await createCompleter({ idem, backoff: { baseMs: 60_000, jitter: 'none' } }).runOnce();
    const body = await requestDetail(scope);
    expect(body.completion).toMatchObject({ attempts: 1, giveUp: null });
    expect(body.completion!.lastError).toContain('carrier down');
    // The other tests count the populated rows.
    await db.pool.query(`DELETE FROM "${db.schema}".requests WHERE operation = 'ship-order'`);
  });

  it('returns a stored body as text when UTF-8 and as a hex dump when binary', async () => {
    const note = await requestDetail({ tenant: 'acme', operation: 'POST /v1/notes', key: 'note-1' });
    expect(note.body).toEqual({
      bytes: hostileBody.length,
      encoding: 'utf8',
      text: hostileBody,
      truncated: false,
    });
    const image = await requestDetail({ tenant: 'globex', operation: 'POST /v1/images', key: 'image-1' });
    expect(image.body).toMatchObject({ bytes: 12, encoding: 'hex', truncated: false });
    expect(image.body!.text).toBe(
      '00000000  89 50 4e 47 0d 0a 1a 0a 00 00 ff fe              |.PNG........|',
    );
  });

  it('answers 404 for an unknown request and 400 without its key', async () => {
    expect(
      (await get('requests/detail', { tenant: 'acme', operation: 'POST /v1/payments', key: 'nope' })).status,
    ).toBe(404);
    expect((await get('requests/detail', { tenant: 'acme', operation: 'POST /v1/payments' })).status).toBe(
      400,
    );
    // The tenant is part of the lookup: another tenant's key is not found.
    expect((await get('requests/detail', { ...data.crashed, tenant: 'globex' })).status).toBe(404);
  });

  it('shows the outbox backlog, lag, the dead letter with its error, and what waits behind it', async () => {
    const { body, text } = await get<OutboxView>('outbox');
    expect(body.stats).toMatchObject({ pending: 2, retrying: 1, parked: 1, dead: 1, published: 1 });
    expect(body.topics).toEqual([
      { topic: 'emails', pending: 1, dead: 0, oldestPendingAgeMs: expect.any(Number) as number },
      { topic: 'payments', pending: 1, dead: 1, oldestPendingAgeMs: expect.any(Number) as number },
    ]);
    expect(body.dead).toHaveLength(1);
    expect(body.dead[0]).toMatchObject({
      id: data.deadEventId,
      topic: 'payments',
      key: 'pay_c1',
      type: 'payment.refunded',
      attempts: 1,
      lastError: 'Error: broker refused: message too large',
      availableAt: null,
    });
    expect(body.dead[0]!.headers).toEqual([
      ['traceparent', '00-abc-def-01'],
      ['authorization', '[redacted]'],
    ]);
    expect(JSON.parse(body.dead[0]!.payload!.text)).toEqual({ id: 'pay_c1', note: hostileBody });
    expect(body.retrying.map((e) => [e.id, e.lastError])).toEqual([
      [data.retryingEventId, 'Error: smtp 451 try again later'],
    ]);
    expect(text).not.toContain('sk_live_never_shown');
    expect((await get<OutboxView>('outbox', { topic: 'emails' })).body.dead).toEqual([]);
  });

  it('shows the dead inbox message with its payload and redacted headers', async () => {
    const { body, text } = await get<InboxView>('inbox');
    expect(body.consumers).toEqual([{ consumer: 'ledger', processed: 2, dead: 1, duplicates: 1 }]);
    expect(body.dead).toHaveLength(1);
    expect(body.dead[0]).toMatchObject({
      consumer: 'ledger',
      messageId: 'evt_9',
      attempts: 5,
      lastError: 'TypeError: account is undefined',
      origin: 'payments.created',
    });
    expect(body.dead[0]!.headers).toEqual([
      ['content-type', 'application/json'],
      ['authorization', '[redacted]'],
    ]);
    expect(JSON.parse(body.dead[0]!.payload!.text)).toEqual({ id: 'pay_x', note: hostileBody });
    expect(text).not.toContain('sk_live_never_shown');
    expect((await get<InboxView>('inbox', { consumer: 'billing' })).body).toEqual({
      consumers: [],
      dead: [],
    });
  });

  it('shows dead, superseded and unhandled webhook receipts and parked entities, without signature headers', async () => {
    const { body, text } = await get<WebhooksView>('webhooks');
    expect(body.sources).toEqual([
      {
        source: 'provider',
        counts: { applied: 2, dead: 1, superseded: 1, unhandled: 1, waiting: 1 },
        oldestPendingAgeMs: null,
      },
    ]);
    expect(body.dead.map((r) => [r.deliveryId, r.eventType, r.lastError])).toEqual([
      ['msg_dispute', 'charge.disputed', 'Error: dispute handler: ledger account 7 is closed'],
    ]);
    expect(body.superseded).toHaveLength(1);
    expect(body.superseded[0]).toMatchObject({
      deliveryId: 'msg_refund_v1',
      entity: { scope: 'charge', key: 'ch_c0', version: '1' },
      appliedVersion: '2',
    });
    expect(body.unhandled.map((r) => r.eventType)).toEqual(['customer.updated']);
    expect(body.superseded[0]!.headers).toContainEqual(['x-account', 'acct_42']);
    expect(body.parked).toEqual([
      expect.objectContaining({
        scope: 'balance',
        key: 'acct_9',
        appliedVersion: '1',
        missingVersion: '2',
        waiting: 1,
        lowestWaitingVersion: '3',
      }),
    ]);
    expect(body.parked[0]!.reason).toMatch(/version 2 has not arrived/);
    expect(text).not.toContain('webhook-signature');
    expect(text).not.toMatch(/v1,[A-Za-z0-9+/=]{20,}/);
    expect(body.deliveries.counts).toEqual({});
  });

  it('shows dead tasks and claims whose lease lapsed, filtered by exact tenant', async () => {
    const { body } = await get<TasksView>('tasks');
    expect(body.dead.map((t) => [t.id, t.key, t.lastError])).toEqual([
      [data.deadTaskId, 'receipt:pay_c0', 'Error: PDF renderer: font missing'],
    ]);
    expect(body.stuck.map((t) => [t.id, t.state, t.attempts])).toEqual([[data.stuckTaskId, 'claimed', 1]]);
    expect(body.queues.map((q) => [q.queue, q.counts])).toEqual([
      ['emails', { ready: 1 }],
      ['receipts', { claimed: 1, dead: 1 }],
    ]);
    const globex = (await get<TasksView>('tasks', { tenant: 'globex' })).body;
    expect(globex.queues.map((q) => q.queue)).toEqual(['emails']);
    expect(globex.dead).toEqual([]);
  });

  it('shows the stuck saga with its steps and both errors', async () => {
    const { body } = await get<SagasView>('sagas');
    expect(body.counts).toEqual({ stuck: 1 });
    expect(body.stuck).toHaveLength(1);
    expect(body.stuck[0]).toMatchObject({
      tenant: 'acme',
      saga: 'ship-order',
      key: 'order-77',
      status: 'stuck',
      error: 'TypeError: card expired',
    });
    expect(body.stuck[0]!.stuckError).toContain('warehouse API 503');
    expect(body.stuck[0]!.steps.map((s) => [s.name, s.state, s.compensationAttempts])).toEqual([
      ['reserve-stock', 'done', 2],
      ['charge-card', 'compensated', 0],
    ]);
    expect((await get<SagasView>('sagas', { tenant: 'globex' })).body.stuck).toEqual([]);
  });

  it('pushes live counters over Server-Sent Events', async () => {
    const controller = new AbortController();
    const res = await fetch(`${server.url}/api/live`, { signal: controller.signal });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    const summaries: ConsoleSummary[] = [];
    while (summaries.length < 2) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.indexOf('\n\n')) !== -1) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = /^event: summary\ndata: (.*)$/m.exec(frame);
        if (data) summaries.push(JSON.parse(data[1]!) as ConsoleSummary);
      }
    }
    controller.abort();
    expect(summaries).toHaveLength(2);
    expect(summaries[0]!.requests.stuck).toBe(1);
    expect(Date.parse(summaries[1]!.at)).toBeGreaterThan(Date.parse(summaries[0]!.at));
  });

  it('ends open live streams when the server closes, so close() never hangs', async () => {
    const other = await startConsole({ pool: db.pool, schema: db.schema, liveIntervalMs: 60_000 });
    const res = await fetch(`${other.url}/api/live`);
    const reader = res.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toContain(': idem console');
    // close() returns (a hung one would fail the test on its timeout), and the stream ends.
    await other.close();
    for (let i = 0; i < 10; i++) if ((await reader.read()).done) return;
    throw new Error('the stream did not end');
  });

  it('redrives a dead event through the outbox API: revived, and the parked event released', async () => {
    const redrive = (body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${server.url}/api/outbox/redrive`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-idem-console': '1', ...headers },
        body: JSON.stringify(body),
      });
    expect((await redrive({})).status).toBe(400); // "all" must be explicit
    expect((await redrive({ id: 'not-a-uuid' })).status).toBe(400);
    const res = await redrive({ id: data.deadEventId });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ revived: 1, released: 1 });
    const { rows } = await db.pool.query<{ dead_at: Date | null; attempts: number; due: boolean }>(
      `SELECT id, dead_at, attempts, available_at <> 'infinity' AS due FROM "${db.schema}".outbox WHERE id = ANY($1) ORDER BY seq`,
      [[data.deadEventId, data.parkedEventId]],
    );
    expect(rows.map((r) => [r.dead_at, r.attempts, r.due])).toEqual([
      [null, 0, true],
      [null, 0, true],
    ]);
    expect((await get<ConsoleSummary>('summary')).body.outbox.dead).toBe(0);
    expect(await (await redrive({ id: data.deadEventId })).json()).toEqual({ revived: 0, released: 0 });
  });

  it('reads in a read-only transaction with a statement timeout', async () => {
    const reader = consoleDatabase({ sql: fromPg(db.pool), schema: db.schema }, systemClock, 150);
    await expect(reader.read((tx) => tx.query(`DELETE FROM "${db.schema}".requests`))).rejects.toMatchObject({
      code: '25006', // read_only_sql_transaction
    });
    await expect(reader.read((tx) => tx.query('SELECT pg_sleep(2)'))).rejects.toMatchObject({
      code: '57014', // query_canceled (statement_timeout)
    });
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${db.schema}".requests`,
    );
    expect(rows[0]!.n).toBe(8);
  });

  it('refuses a schema name that is not a plain identifier', async () => {
    const app = Fastify();
    await expect(
      app.register(consolePlugin, { pool: db.pool, schema: 'idem"; DROP TABLE x; --' }),
    ).rejects.toMatchObject({
      code: 'IDEM_INVALID_ARGUMENT',
    });
    await app.close().catch(() => undefined);
  });
});
