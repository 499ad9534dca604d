/**
 * Console test support: a schema filled through idem's real APIs (HTTP integration, steps, outbox
 * dispatcher, inbox, webhook receiver and processor, claims, sagas), and a console server.
 */
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import type pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { fromPg } from '../../src/adapters/pg.js';
import { createClaims } from '../../src/claims/claims.js';
import type { Clock } from '../../src/core/clock.js';
import { consolePlugin } from '../../src/console/plugin.js';
import type { ConsoleOptions } from '../../src/console/options.js';
import { idempotency } from '../../src/http/fastify.js';
import { defaultReplayHeaders } from '../../src/http/response-headers.js';
import { createInbox } from '../../src/inbox/inbox.js';
import { createIdem } from '../../src/operations/idem.js';
import { createOutboxDispatcher } from '../../src/outbox/dispatcher.js';
import { createOutbox } from '../../src/outbox/outbox.js';
import type { OutboxEvent, Publisher, PublishResult } from '../../src/outbox/types.js';
import { createWebhookProcessor } from '../../src/webhooks/processor.js';
import { createWebhookReceiver } from '../../src/webhooks/receiver.js';
import { createStandardWebhooksVerifier } from '../../src/webhooks/verify/standard-webhooks.js';
import { createSagas, defineSaga, step } from '../../src/workflow/index.js';
import { webhooks as fastifyWebhooks } from '../../src/webhooks/fastify.js';
import { quietEvents } from '../support/events.js';

/** Time that only moves when told to; `sleep` (backoff) moves it at once. */
export class StepClock implements Clock {
  constructor(private current: number) {}
  now(): number {
    return this.current;
  }
  async sleep(ms: number): Promise<void> {
    this.current += Math.max(0, ms);
  }
  advance(ms: number): void {
    this.current += ms;
  }
}

export const webhookSecret = 'whsec_' + Buffer.from('console-test-webhook-secret-0123').toString('base64');
/** A body that tries every trick: it must show up as text, never run. */
export const hostileBody = `<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">`;
export const binaryBody = new Uint8Array([
  0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0xff, 0xfe,
]);

/** What `populate` created, for assertions. */
export interface Populated {
  /** The crashed multi-step operation (pending, lease lapsed, recovery point `reserve`). */
  crashed: { tenant: string; operation: string; key: string };
  /** A pending operation whose lease is still held. */
  running: { tenant: string; operation: string; key: string };
  paymentKeys: string[];
  deadEventId: string;
  parkedEventId: string;
  retryingEventId: string;
  deadTaskId: string;
  stuckTaskId: string;
  /** Lets the running operation finish (call before closing the pool). */
  finish(): Promise<void>;
}

/**
 * Fills the schema. Writers run on a clock 40 minutes behind the wall clock, so leases they set
 * have lapsed for the console (which reads the wall clock), except the one `running` operation.
 */
export async function populate(pool: pg.Pool, schema: string): Promise<Populated> {
  const sql = fromPg(pool);
  const clock = new StepClock(Date.now() - 40 * 60_000);
  const idem = createIdem({ sql, schema, clock, leaseMs: 30_000 });

  // --- HTTP: stored responses (JSON, hostile text, binary), through the Fastify integration.
  const app = Fastify();
  const receiver = createWebhookReceiver({
    sql,
    schema,
    clock,
    sources: {
      provider: {
        verifier: createStandardWebhooksVerifier({ secrets: [webhookSecret] }),
        storeHeaders: ['x-account'],
      },
    },
  });
  await app.register(fastifyWebhooks({ routes: { '/webhooks/provider': 'provider' }, receiver: receiver }));
  await app.register(async (api) => {
    await api.register(idempotency, {
      idem,
      tenant: (request) => request.headers['x-tenant'] as string | undefined,
      replayHeaders: [...defaultReplayHeaders, 'set-cookie', 'x-response-signature'],
    });
    api.post<{ Body: { amount: number; customer: string } }>(
      '/v1/payments',
      { config: { idempotency: { mode: 'steps' } } },
      async (request, reply) => {
        const idemContext = request.idem!;
        const payment = await idemContext.step('record-payment', async () => ({
          id: `pay_${request.body.customer}`,
        }));
        const charge = await idemContext.step('charge', async () => ({
          chargeId: `ch_${request.body.customer}`,
        }));
        return reply
          .code(201)
          .header('location', `/v1/payments/${payment.id}`)
          .header('set-cookie', 'session=abc123; HttpOnly')
          .header('x-response-signature', 'sig-must-not-show')
          .send({
            id: payment.id,
            amount: request.body.amount,
            charge_id: charge.chargeId,
            status: 'succeeded',
          });
      },
    );
    api.post('/v1/notes', async (_request, reply) => reply.code(200).type('text/plain').send(hostileBody));
    api.post('/v1/images', async (_request, reply) =>
      reply.code(201).type('image/png').send(Buffer.from(binaryBody)),
    );
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const post = (path: string, tenant: string, key: string, body: unknown) =>
    fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tenant': tenant, 'idempotency-key': key },
      body: JSON.stringify(body),
    });
  const paymentKeys = ['order-1001', 'order-1002', 'order-1003'];
  for (const [i, key] of paymentKeys.entries()) {
    const res = await post('/v1/payments', 'acme', key, { amount: 1000 + i, customer: `c${i}` });
    if (res.status !== 201) throw new Error(`payment ${key}: ${res.status}`);
    clock.advance(1000);
  }
  // Same key string under another tenant whose name starts like the first: an exact filter tells them apart.
  await post('/v1/payments', 'acme_eu', 'order-1001', { amount: 5, customer: 'eu' });
  await post('/v1/notes', 'acme', 'note-1', { text: 'x' });
  await post('/v1/images', 'globex', 'image-1', { size: 12 });

  // --- Webhooks: applied, superseded (older version after a newer one), unhandled, dead, and a
  // sequence entity parked on a gap (version 2 never came; 3 waits).
  const signer = new Webhook(webhookSecret);
  const deliver = async (id: string, type: string, data: unknown) => {
    const body = JSON.stringify({ type, data });
    const at = new Date(clock.now());
    const res = await fetch(`${url}/webhooks/provider`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'webhook-id': id,
        'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
        'webhook-signature': signer.sign(id, at, body),
        'x-account': 'acct_42',
      },
      body,
    });
    if (res.status >= 300) throw new Error(`webhook ${id}: ${res.status} ${await res.text()}`);
  };
  const processor = createWebhookProcessor({
    sql,
    schema,
    clock,
    maxAttempts: 1,
    handlers: {
      provider: {
        'charge.refunded': {
          entity: (event) => {
            const data = event.json<{ data: { charge_id: string; version: number } }>().data;
            return { key: data.charge_id, version: data.version, scope: 'charge' };
          },
          handle: async () => undefined,
        },
        'charge.disputed': async () => {
          throw new Error('dispute handler: ledger account 7 is closed');
        },
        'balance.changed': {
          ordering: 'sequence',
          gapTimeoutMs: 1000,
          entity: (event) => {
            const data = event.json<{ data: { account: string; sequence: number } }>().data;
            return { key: data.account, version: data.sequence, scope: 'balance' };
          },
          handle: async () => undefined,
        },
      },
    },
  });
  await deliver('msg_refund_v2', 'charge.refunded', { charge_id: 'ch_c0', amount: 500, version: 2 });
  await processor.drain();
  await deliver('msg_refund_v1', 'charge.refunded', { charge_id: 'ch_c0', amount: 400, version: 1 });
  await deliver('msg_dispute', 'charge.disputed', { charge_id: 'ch_c1' });
  await deliver('msg_unknown', 'customer.updated', { id: 'cus_1' });
  await deliver('msg_balance_1', 'balance.changed', { account: 'acct_9', sequence: 1 });
  await processor.drain({ limit: 1 });
  await deliver('msg_balance_3', 'balance.changed', { account: 'acct_9', sequence: 3 });
  await processor.drain();
  clock.advance(1000);
  await processor.drain();
  await app.close();

  // --- A multi-step operation whose second step failed: pending, lease released, resumable.
  const crashed = { tenant: 'acme', operation: 'refund-payment', key: 'refund-7' };
  await idem
    .steps({ ...crashed, request: { payment: 'pay_c0', amount: 500 } }, async (op) => {
      await op.step('reserve', async () => ({ reservation: 'res_1' }));
      await op.step('charge', async () => {
        throw Object.assign(new Error('provider timed out'), { retryable: true });
      });
    })
    .catch(() => undefined);

  // --- A pending operation whose lease is held (wall clock, long lease) until `finish`.
  const running = { tenant: 'globex', operation: 'export-ledger', key: 'export-2024-06' };
  const live = createIdem({ sql, schema, leaseMs: 600_000 });
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let started!: () => void;
  const began = new Promise<void>((resolve) => (started = resolve));
  const runningDone = live.steps({ ...running, request: { month: '2024-06' } }, async (op) => {
    await op.step('collect', async () => ({ rows: 1200 }));
    started();
    await gate;
    return { done: true };
  });
  await began;

  // --- Outbox: one published, one dead (refused for good) with one parked behind it, one retrying.
  const outbox = createOutbox({ sql, schema, clock, notify: false });
  const ids = await sql.transaction(async (tx) => [
    await outbox.add(tx, {
      topic: 'payments',
      key: 'pay_c0',
      type: 'payment.created',
      payload: { id: 'pay_c0', amount: 1000 },
    }),
    await outbox.add(tx, {
      topic: 'payments',
      key: 'pay_c1',
      type: 'payment.refunded',
      payload: { id: 'pay_c1', note: hostileBody },
      headers: { traceparent: '00-abc-def-01', authorization: 'Bearer sk_live_never_shown' },
    }),
    await outbox.add(tx, {
      topic: 'payments',
      key: 'pay_c1',
      type: 'payment.closed',
      payload: { id: 'pay_c1' },
    }),
    await outbox.add(tx, {
      topic: 'emails',
      key: 'bob',
      type: 'email.send',
      payload: { to: 'bob@example.test' },
    }),
  ]);
  const publisher: Publisher = {
    name: 'console-test',
    async publish(events: readonly OutboxEvent[]): Promise<readonly PublishResult[]> {
      return events.map((event): PublishResult => {
        if (event.type === 'payment.refunded') {
          return {
            id: event.id,
            ok: false,
            error: new Error('broker refused: message too large'),
            retryable: false,
          };
        }
        if (event.type === 'email.send') {
          return { id: event.id, ok: false, error: new Error('smtp 451 try again later'), retryable: true };
        }
        return { id: event.id, ok: true };
      });
    },
  };
  const dispatcher = createOutboxDispatcher({
    sql,
    schema,
    clock,
    publisher,
    sweepIntervalMs: 0,
    events: quietEvents(), // its publisher fails on purpose: no line on stderr for it
  });
  await dispatcher.drain({ maxBatches: 5 });

  // --- Inbox: processed messages, a duplicate, and a dead message with its payload and headers.
  const inbox = createInbox({ sql, schema, clock });
  for (const id of ['evt_1', 'evt_2', 'evt_2']) {
    await inbox.handle({ consumer: 'ledger', messageId: id }, async () => undefined);
  }
  await inbox.markDead({
    consumer: 'ledger',
    messageId: 'evt_9',
    attempts: 5,
    error: 'TypeError: account is undefined',
    origin: 'payments.created',
    payload: new TextEncoder().encode(JSON.stringify({ id: 'pay_x', note: hostileBody })),
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk_live_never_shown' },
  });

  // --- Claims: a dead task (permanent failure), a stuck claim (lease lapsed), a ready task.
  const claims = createClaims({ sql, schema, clock, leaseMs: 10_000 });
  await claims.enqueue({
    tenant: 'acme',
    queue: 'receipts',
    key: 'receipt:pay_c0',
    payload: { paymentId: 'pay_c0' },
  });
  await claims.enqueue({
    tenant: 'acme',
    queue: 'receipts',
    key: 'receipt:pay_c1',
    payload: { paymentId: 'pay_c1' },
  });
  await claims.enqueue({ tenant: 'globex', queue: 'emails', key: 'welcome:bob', payload: { to: 'bob' } });
  const [toFail] = await claims.claim('receipts');
  await claims.fail(toFail!, new Error('PDF renderer: font missing'), { retryable: false });
  const [toStall] = await claims.claim('receipts');

  // --- Sagas: one stuck (its compensation keeps failing).
  const sagas = createSagas({ sql, schema, clock, compensationAttempts: 2, actionAttempts: 1 });
  const order = defineSaga<{ order: string }>({
    name: 'ship-order',
    steps: [
      step({
        name: 'reserve-stock',
        action: async () => ({ reservation: 'r-1' }),
        compensate: async () => {
          throw Object.assign(new Error('warehouse API 503'), { retryable: true });
        },
      }),
      step({
        name: 'charge-card',
        action: async () => {
          throw new TypeError('card expired');
        },
      }),
    ],
  });
  await sagas
    .run(order, { tenant: 'acme', key: 'order-77', input: { order: 'order-77' } })
    .catch(() => undefined);

  return {
    crashed,
    running,
    paymentKeys,
    deadEventId: ids[1]!,
    parkedEventId: ids[2]!,
    retryingEventId: ids[3]!,
    deadTaskId: String(toFail!.id),
    stuckTaskId: String(toStall!.id),
    async finish() {
      release();
      await runningDone;
    },
  };
}

/** A console on its own Fastify server. */
export interface ConsoleServer {
  app: FastifyInstance;
  url: string;
  port: number;
  close(): Promise<void>;
}

export async function startConsole(
  options: ConsoleOptions & { listenHost?: string },
): Promise<ConsoleServer> {
  const app = Fastify();
  await app.register(consolePlugin, options);
  await app.listen({ port: 0, host: options.listenHost ?? options.host ?? '127.0.0.1' });
  const port = (app.server.address() as AddressInfo).port;
  return { app, port, url: `http://127.0.0.1:${port}/console`, close: () => app.close() };
}
