/**
 * The sender against real local HTTP endpoints on 127.0.0.1 that fail, throttle with Retry-After,
 * answer 410, hang, or recover; on a real PostgreSQL, with an injected clock for the schedule.
 */
import { createServer, type IncomingMessage } from 'node:http';
import { Webhook } from 'standardwebhooks';
import { Webhook as SvixWebhook } from 'svix';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fromPg, fromPgClient, type PgClientLike } from '../../src/adapters/pg.js';
import { ManualClock } from '../../src/core/clock.js';
import type { OutboxEvent } from '../../src/outbox/types.js';
import {
  createWebhookSender,
  generateWebhookKeyPair,
  recordHeaders,
  createStandardWebhooksVerifier,
  createWebhookPublisher,
  type WebhookSender,
  type WebhookSenderOptions,
} from '../../src/webhooks/index.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import {
  capturingEvents,
  count,
  listenNode,
  standardSecret,
  standardSecretNext,
  type TestServer,
  resetSender,
} from './support.js';

interface Seen {
  headers: Record<string, string>;
  body: Buffer;
}
type Reply = { status: number; headers?: Record<string, string> } | 'hang';

/** A real endpoint that answers from a script (the last reply repeats) and records every request. */
async function endpoint(script: Reply[]): Promise<TestServer & { seen: Seen[]; script: Reply[] }> {
  const seen: Seen[] = [];
  const hanging: IncomingMessage[] = [];
  const server = await listenNode(
    createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        seen.push({ headers: req.headers as Record<string, string>, body: Buffer.concat(chunks) });
        const reply = state.script.length > 1 ? state.script.shift()! : state.script[0]!;
        if (reply === 'hang') {
          hanging.push(req);
          return;
        }
        res.writeHead(reply.status, reply.headers ?? {}).end('ok');
      });
    }),
  );
  const state = { ...server, seen, script };
  return state;
}

let db: TestSchema;
let clock: ManualClock;
let sender: WebhookSender<PgClientLike>;
const servers: TestServer[] = [];
let sequence = 0;

function createSender(options: Partial<WebhookSenderOptions<PgClientLike>> = {}) {
  return createWebhookSender<PgClientLike>({
    sql: fromPg<PgClientLike>(db.pool),
    schema: db.schema,
    clock,
    random: () => 0.5, // jitter factor 1: scheduled delays exactly as listed
    // The endpoints here are real servers on loopback, which the sender refuses unless allowed.
    allowedDestinations: ['127.0.0.1'],
    ...options,
  });
}

async function subscriber(script: Reply[], secrets = [standardSecret], eventTypes?: string[]) {
  const server = await endpoint(script);
  servers.push(server);
  const created = await sender.endpoints.create({ url: `${server.url}/hook`, secrets, eventTypes });
  return { server, id: created.id };
}

const message = (type = 'invoice.paid') => ({
  id: `msg_${++sequence}`,
  type,
  payload: { invoice: sequence },
});

beforeAll(async () => {
  db = await createTestSchema();
});

beforeEach(() => {
  clock = new ManualClock(Math.floor(Date.now() / 1000) * 1000);
  sender = createSender();
});

afterEach(async () => {
  await resetSender(db, servers);
});

afterAll(async () => {
  await db?.close();
});

describe('retries', () => {
  it('fails, throttles with Retry-After, then succeeds: same webhook-id, every attempt logged', async () => {
    const captured = capturingEvents();
    sender = createSender({ events: captured.events });
    const { server, id: endpointId } = await subscriber([
      { status: 500 },
      { status: 429, headers: { 'retry-after': '900' } },
      { status: 204 },
    ]);
    const m = message();
    const [first] = await sender.deliver(m);
    expect(first).toMatchObject({ outcome: 'retry', status: 500, attempt: 1 });
    expect(first!.nextAttemptAt! - clock.now()).toBe(5_000);

    clock.advance(5_000);
    const [second] = await sender.runOnce();
    expect(second).toMatchObject({ outcome: 'retry', status: 429, attempt: 2 });
    // Retry-After 900 s is later than the schedule's 5 minutes: it wins.
    expect(second!.nextAttemptAt! - clock.now()).toBe(900_000);

    clock.advance(5 * 60_000);
    expect(await sender.runOnce()).toEqual([]);
    expect(server.seen).toHaveLength(2);
    clock.advance(10 * 60_000);
    const [third] = await sender.runOnce();
    expect(third).toMatchObject({ outcome: 'delivered', status: 204, attempt: 3 });

    expect(server.seen.map((s) => s.headers['webhook-id'])).toEqual([m.id, m.id, m.id]);
    const timestamps = server.seen.map((s) => Number(s.headers['webhook-timestamp']));
    expect(new Set(timestamps).size).toBe(3);
    // Every attempt verifies with the receiver's verifier at its own time; the first also with the npm package.
    const verifier = createStandardWebhooksVerifier({ secrets: [standardSecret] });
    for (const s of server.seen) {
      const at = Number(s.headers['webhook-timestamp']) * 1000;
      expect(verifier.verify({ headers: recordHeaders(s.headers), body: s.body }, at).deliveryId).toBe(m.id);
      expect(s.body.toString()).toBe(JSON.stringify(m.payload));
    }
    expect(new Webhook(standardSecret).verify(server.seen[0]!.body, server.seen[0]!.headers)).toEqual(
      m.payload,
    );
    // And with the svix package, which verifies what providers sending through Svix would sign.
    expect(() =>
      new SvixWebhook(standardSecret).verify(server.seen[0]!.body.toString(), server.seen[0]!.headers),
    ).not.toThrow();

    const attempts = await sender.listAttempts({ messageId: m.id });
    expect(attempts.map((a) => [a.attempt, a.status, a.outcome, a.retryAfterMs])).toEqual([
      [1, 500, 'retry', null],
      [2, 429, 'retry', 900_000],
      [3, 204, 'delivered', null],
    ]);
    for (const a of attempts) {
      expect(a.endpointId).toBe(endpointId);
      expect(a.latencyMs).toBeGreaterThan(0);
    }
    const [delivery] = await sender.listDeliveries({ messageId: m.id });
    expect(delivery).toMatchObject({ state: 'delivered', attempts: 3, lastStatus: 204 });
    // One event per attempt, after it was recorded.
    const ref = { tenant: '', messageId: m.id, endpointId };
    expect(captured.kept).toEqual([
      {
        name: 'webhook:delivery-failed',
        event: {
          ...ref,
          attempt: 1,
          status: 500,
          error: 'HTTP 500',
          final: false,
          nextAttemptAt: first!.nextAttemptAt,
          latencyMs: expect.any(Number) as unknown,
        },
      },
      {
        name: 'webhook:delivery-failed',
        event: expect.objectContaining({ ...ref, attempt: 2, status: 429, final: false }) as unknown,
      },
      {
        name: 'webhook:delivered',
        event: { ...ref, attempt: 3, status: 204, latencyMs: expect.any(Number) as unknown },
      },
    ]);
  });

  it('Retry-After as an HTTP date, and capped at maxRetryAfterMs', async () => {
    sender = createSender({ maxRetryAfterMs: 3_600_000, backoff: { delaysMs: [1000, 1000, 1000] } });
    await subscriber([
      { status: 503, headers: { 'retry-after': new Date(clock.now() + 120_000).toUTCString() } },
      { status: 503, headers: { 'retry-after': String(7 * 86_400) } },
      { status: 200 },
    ]);
    const m = message();
    const [first] = await sender.deliver(m);
    expect(first!.nextAttemptAt! - clock.now()).toBe(120_000);
    clock.advance(120_000);
    const [second] = await sender.runOnce();
    expect(second!.nextAttemptAt! - clock.now()).toBe(3_600_000);
  });

  it('the schedule ends in a failed delivery; redrive tries again', async () => {
    sender = createSender({ backoff: { delaysMs: [1000, 2000] } });
    const { server } = await subscriber([{ status: 500 }]);
    const m = message();
    await sender.deliver(m);
    clock.advance(1000);
    await sender.runOnce();
    clock.advance(2000);
    const [last] = await sender.runOnce();
    expect(last).toMatchObject({ outcome: 'failed', attempt: 3 });
    clock.advance(86_400_000);
    expect(await sender.runOnce()).toEqual([]);
    expect(server.seen).toHaveLength(3);
    server.script.splice(0, server.script.length, { status: 200 });
    expect(await sender.redrive({ messageId: m.id })).toBe(1);
    expect((await sender.runOnce())[0]).toMatchObject({ outcome: 'delivered', attempt: 1 });
  });

  it('jitter spreads the scheduled delay by ± the configured share', async () => {
    for (const [random, expected] of [
      [0, 4000],
      [0.999999, 6000],
    ] as const) {
      sender = createSender({ random: () => random });
      await subscriber([{ status: 500 }]);
      const [result] = await sender.deliver(message());
      expect(result!.nextAttemptAt! - clock.now()).toBeCloseTo(expected, -1);
      await db.pool.query(`DELETE FROM "${db.schema}".webhook_endpoints`);
    }
  });

  it('a hanging endpoint times out: no status, a retry scheduled', async () => {
    sender = createSender({ timeoutMs: 200, leaseMs: 10_000 });
    await subscriber(['hang']);
    const [result] = await sender.deliver(message());
    expect(result).toMatchObject({ outcome: 'retry', status: undefined });
    const [attempt] = await sender.listAttempts({ messageId: result!.messageId });
    expect(attempt).toMatchObject({ status: null, outcome: 'retry' });
    expect(attempt!.error).toMatch(/abort|timeout/i);
    expect(attempt!.latencyMs).toBeGreaterThanOrEqual(150);
  });
});

describe('410 Gone and the circuit breaker', () => {
  it('410 disables the endpoint and cancels its pending deliveries; other endpoints go on', async () => {
    const captured = capturingEvents();
    sender = createSender({ events: captured.events });
    const gone = await subscriber([{ status: 410 }]);
    const healthy = await subscriber([{ status: 200 }]);
    const [first, second, third] = [message(), message(), message()];
    await sender.enqueue(sender.sql, second);
    await sender.enqueue(sender.sql, third);
    const results = await sender.deliver(first);
    expect(results.find((r) => r.endpointId === gone.id)).toMatchObject({ outcome: 'gone', status: 410 });
    expect(results.find((r) => r.endpointId === healthy.id)).toMatchObject({
      outcome: 'delivered',
      status: 200,
    });
    const endpoint = await sender.endpoints.get(gone.id);
    expect(endpoint).toMatchObject({ enabled: false, disabledReason: 'gone: the endpoint answered 410' });
    expect(captured.of('webhook:endpoint-disabled')).toEqual([
      {
        tenant: '',
        messageId: first.id,
        endpointId: gone.id,
        attempt: 1,
        status: 410,
        reason: 'gone: the endpoint answered 410',
      },
    ]);
    const states = await sender.listDeliveries({ endpointId: gone.id });
    expect(states.map((d) => d.state)).toEqual(['cancelled', 'cancelled', 'cancelled']);
    expect(
      (await sender.listAttempts({ messageId: first.id, endpointId: gone.id })).map((a) => a.outcome),
    ).toEqual(['gone']);
    // Nothing more goes there, even for new messages; the healthy endpoint gets everything.
    clock.advance(86_400_000);
    await sender.deliver(message());
    await sender.drain();
    expect(gone.server.seen).toHaveLength(1);
    expect(healthy.server.seen).toHaveLength(4);
    // Re-enabled by hand, its cancelled deliveries can be redriven.
    gone.server.script.splice(0, gone.server.script.length, { status: 200 });
    await sender.endpoints.enable(gone.id);
    expect(await sender.redrive({ endpointId: gone.id, states: ['cancelled'] })).toBe(3);
    expect((await sender.drain()).map((r) => r.outcome)).toEqual(['delivered', 'delivered', 'delivered']);
  });

  it('opens after consecutive failures: no request is made and no attempt is spent; closes after recovery', async () => {
    sender = createSender({
      breaker: { consecutiveFailures: 3, halfOpenAfterMs: 150 },
      backoff: { delaysMs: [1000, 1000, 1000, 1000, 1000] },
    });
    const { server } = await subscriber([{ status: 503 }]);
    const messages = [message(), message(), message(), message()];
    for (const m of messages) await sender.enqueue(sender.sql, m);
    const outcomes = (await sender.runOnce(1)).concat(await sender.runOnce(1), await sender.runOnce(1));
    expect(outcomes.map((o) => o.outcome)).toEqual(['retry', 'retry', 'retry']);
    const blocked = await sender.runOnce(1);
    expect(blocked[0]).toMatchObject({ outcome: 'circuit-open' });
    expect(server.seen).toHaveLength(3);
    const [delivery] = await sender.listDeliveries({ messageId: blocked[0]!.messageId });
    expect(delivery).toMatchObject({
      state: 'pending',
      attempts: 0,
      lastError: 'circuit open: endpoint failing',
    });
    expect(await count(db.pool, db.schema, 'webhook_delivery_attempts')).toBe(3);

    // The endpoint recovers; after the half-open delay (on the sender's clock) one trial closes it.
    server.script.splice(0, server.script.length, { status: 200 });
    clock.advance(60_000);
    const after = await sender.drain({ limit: 1 });
    expect(after.map((r) => r.outcome)).toEqual(['delivered', 'delivered', 'delivered', 'delivered']);
  });
});

describe('signing, fan-out and the outbox publisher', () => {
  it('rotation: every secret signs; receivers knowing either the old or the new one accept; v1a too', async () => {
    const pair = generateWebhookKeyPair();
    const { server } = await subscriber(
      [{ status: 200 }],
      [standardSecretNext, standardSecret, pair.secretKey],
    );
    await sender.deliver(message());
    const [seen] = server.seen;
    const signature = seen!.headers['webhook-signature']!;
    expect(signature.split(' ').map((s) => s.split(',')[0])).toEqual(['v1', 'v1', 'v1a']);
    const request = { headers: recordHeaders(seen!.headers), body: seen!.body };
    const at = Number(seen!.headers['webhook-timestamp']) * 1000;
    for (const verifier of [
      createStandardWebhooksVerifier({ secrets: [standardSecret] }),
      createStandardWebhooksVerifier({ secrets: [standardSecretNext] }),
      createStandardWebhooksVerifier({ publicKeys: [pair.publicKey] }),
    ]) {
      expect(verifier.verify(request, at).deliveryId).toBe(seen!.headers['webhook-id']);
    }
    expect(() => createStandardWebhooksVerifier({ secrets: ['whsec_b3RoZXI='] }).verify(request, at)).toThrow(
      /signature/,
    );
  });

  it('fans out by event type, once per message id', async () => {
    const all = await subscriber([{ status: 200 }]);
    const invoices = await subscriber([{ status: 200 }], [standardSecret], ['invoice.paid']);
    const m = message('customer.created');
    expect(await sender.enqueue(sender.sql, m)).toBe(1);
    expect(await sender.enqueue(sender.sql, m)).toBe(0);
    expect(await sender.enqueue(sender.sql, message('invoice.paid'))).toBe(2);
    await sender.drain();
    expect(all.server.seen).toHaveLength(2);
    expect(invoices.server.seen).toHaveLength(1);
  });

  it('enqueue inside the caller’s transaction sends only what commits', async () => {
    const { server } = await subscriber([{ status: 200 }]);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await sender.enqueue(fromPgClient(client), message());
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await sender.drain()).toEqual([]);
    expect(server.seen).toHaveLength(0);
  });

  it('the outbox Publisher: the event id is the webhook-id, republishing adds nothing', async () => {
    const { server } = await subscriber([{ status: 200 }]);
    const publisher = createWebhookPublisher({ sender, notify: false });
    const event: OutboxEvent = {
      id: '0190f5b4-7c1e-7000-8000-000000000001',
      topic: 'webhooks',
      key: 'invoice-1',
      type: 'invoice.paid',
      payload: { invoice: 1 },
      headers: {},
      createdAt: Date.parse('2030-01-01T00:00:00Z'),
      attempts: 0,
    };
    const signal = new AbortController().signal;
    expect(await publisher.publish([event], signal)).toEqual([{ id: event.id, ok: true }]);
    expect(await publisher.publish([{ ...event, attempts: 1 }], signal)).toEqual([
      { id: event.id, ok: true },
    ]);
    await sender.drain();
    expect(server.seen).toHaveLength(1);
    expect(server.seen[0]!.headers['webhook-id']).toBe(event.id);
    expect(JSON.parse(server.seen[0]!.body.toString())).toEqual({
      type: 'invoice.paid',
      timestamp: '2030-01-01T00:00:00.000Z',
      data: { invoice: 1 },
    });
  });
});
