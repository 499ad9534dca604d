/**
 * `idem/lambda` on events that are not HTTP (EventBridge, direct invocations, an SQS record
 * handled one at a time): the key chosen from the event by a path or a function, payload
 * validation, the typed errors for bad input, the handler's result stored and replayed. Through
 * the function wrapper and as Middy middleware, against a real PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import middy from '@middy/core';
import type { Context, EventBridgeEvent, SQSEvent } from 'aws-lambda';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { isKeyReused, refused } from 'idem';
import {
  idempotency,
  isKeyMissing,
  isTenantMissing,
  type IdemLambdaContext,
  type LambdaIdempotencyOptions,
} from 'idem/lambda';
import { useLambdaHarness, lambdaContext, sqsRecord } from '../support/lambda.js';

type OrderPlaced = EventBridgeEvent<'OrderPlaced', { orderId: string; total: number; note?: string }>;
type Handler<E> = (event: E, context: Context) => Promise<unknown>;

const h = useLambdaHarness();

/** An EventBridge event as the bus delivers it: a redelivery keeps `id`, the detail and the time. */
function orderPlaced(orderId: string, total = 40, note?: string): OrderPlaced {
  return {
    version: '0',
    id: `evt-${orderId}`,
    'detail-type': 'OrderPlaced',
    source: 'shop.orders',
    account: '123456789012',
    time: '2026-01-01T12:00:00Z',
    region: 'eu-west-1',
    resources: [],
    detail: { orderId, total, ...(note === undefined ? {} : { note }) },
  };
}

const mountings = {
  wrapper: <E>(options: LambdaIdempotencyOptions<pg.PoolClient, E>, fn: Handler<E>): Handler<E> =>
    idempotency(options).handler(fn),
  middy: <E>(options: LambdaIdempotencyOptions<pg.PoolClient, E>, fn: Handler<E>): Handler<E> =>
    middy(fn, { timeoutEarlyInMillis: 0 }).use(idempotency(options)),
};

describe.each(Object.keys(mountings) as (keyof typeof mountings)[])('keyed events as %s', (mounting) => {
  const mount = <E>(options: Partial<LambdaIdempotencyOptions<pg.PoolClient, E>>, fn: Handler<E>) =>
    mountings[mounting]<E>({ idem: h.idem, singleTenant: true, ...options }, fn);
  /** Writes one effect row keyed by the order id; returns what it wrote. */
  const placeOrder = (runs: { n: number } = { n: 0 }) =>
    async function place(event: OrderPlaced, context: Context) {
      runs.n++;
      const { idem } = context as IdemLambdaContext<pg.PoolClient>;
      const { rows } = await idem!.tx.query<{ id: number }>(
        `INSERT INTO "${h.schema}".effects (key, note) VALUES ($1, $2) RETURNING id`,
        [event.detail.orderId, event.detail.note ?? null],
      );
      return { invoice: rows[0]!.id, orderId: event.detail.orderId };
    };

  it('keys by a path, runs once, replays the stored result; the operation is the function name', async () => {
    const runs = { n: 0 };
    const handler = mount<OrderPlaced>({ key: 'detail.orderId' }, placeOrder(runs));
    const orderId = `order-${randomUUID()}`;
    const first = await handler(orderPlaced(orderId), lambdaContext(30_000, 'billing'));
    const again = await handler(orderPlaced(orderId), lambdaContext(30_000, 'billing'));
    expect(again).toEqual(first);
    expect(runs.n).toBe(1);
    expect(await h.effects(orderId)).toBe(1);
    const row = await h.idem.get({ tenant: 'default', operation: 'billing', key: orderId });
    expect(row?.state).toBe('completed');
  });

  it('refuses another payload under a used key (KeyReusedError), unless `payload` leaves the difference out', async () => {
    const orderId = `order-${randomUUID()}`;
    const strict = mount<OrderPlaced>({ key: 'detail.orderId' }, placeOrder());
    await strict(orderPlaced(orderId, 40), lambdaContext());
    await expect(strict(orderPlaced(orderId, 41), lambdaContext())).rejects.toSatisfy(isKeyReused);
    const lenient = mount<OrderPlaced>({ key: 'detail.orderId', payload: 'detail.total' }, placeOrder());
    const other = `order-${randomUUID()}`;
    await lenient(orderPlaced(other, 40, 'first'), lambdaContext());
    await lenient(orderPlaced(other, 40, 'second'), lambdaContext());
    await expect(lenient(orderPlaced(other, 41), lambdaContext())).rejects.toSatisfy(isKeyReused);
    expect(await h.effects(orderId)).toBe(1);
    expect(await h.effects(other)).toBe(1);
  });

  it('hashes a selection that is not a key (a multiselect list, as powertools_json(body).["user", "productId"])', async () => {
    const handler = mount<OrderPlaced>({ key: 'detail.[orderId, total]' }, placeOrder());
    const orderId = `order-${randomUUID()}`;
    await handler(orderPlaced(orderId, 40), lambdaContext());
    await handler(orderPlaced(orderId, 40), lambdaContext());
    await handler(orderPlaced(orderId, 50), lambdaContext());
    expect(await h.effects(orderId)).toBe(2);
  });

  it('throws KeyMissingError for an event without a key (and for a non-HTTP event with no `key` at all); required: false runs it plainly', async () => {
    let runs = 0;
    const count = async () => {
      runs++;
      return 'ran';
    };
    await expect(
      mount<OrderPlaced>({ key: 'detail.missing' }, count)(orderPlaced('x'), lambdaContext()),
    ).rejects.toSatisfy(isKeyMissing);
    await expect(mount<OrderPlaced>({}, count)(orderPlaced('x'), lambdaContext())).rejects.toSatisfy(
      isKeyMissing,
    );
    expect(runs).toBe(0);
    expect(
      await mount<OrderPlaced>({ key: 'detail.missing', required: false }, count)(
        orderPlaced('x'),
        lambdaContext(),
      ),
    ).toBe('ran');
    expect(runs).toBe(1);
  });

  it('throws TenantMissingError when the tenant resolver names none', async () => {
    const handler = mountings[mounting]<OrderPlaced>(
      {
        idem: h.idem,
        key: 'detail.orderId',
        tenant: ({ event }) => (event.source === 'shop.orders' ? undefined : 'acme'),
      },
      placeOrder(),
    );
    await expect(handler(orderPlaced(`order-${randomUUID()}`), lambdaContext())).rejects.toSatisfy(
      isTenantMissing,
    );
  });

  it('throws the handler’s own error, with its writes rolled back; the redelivery runs afresh', async () => {
    let fail = true;
    const orderId = `order-${randomUUID()}`;
    const handler = mount<OrderPlaced>({ key: 'detail.orderId' }, async (event, context) => {
      const result = await placeOrder()(event, context);
      if (fail) throw new TypeError('ledger closed');
      return result;
    });
    await expect(handler(orderPlaced(orderId), lambdaContext())).rejects.toThrow(TypeError);
    expect(await h.effects(orderId)).toBe(0);
    fail = false;
    await handler(orderPlaced(orderId), lambdaContext());
    expect(await h.effects(orderId)).toBe(1);
  });

  it('stores a business refusal (refused(…)) and replays it like a success', async () => {
    let runs = 0;
    const handler = mount<OrderPlaced>({ key: 'detail.orderId' }, async () => {
      runs++;
      return refused({ declined: 'insufficient funds' });
    });
    const event = orderPlaced(`order-${randomUUID()}`);
    expect(await handler(event, lambdaContext())).toEqual({ declined: 'insufficient funds' });
    expect(await handler(event, lambdaContext())).toEqual({ declined: 'insufficient funds' });
    expect(runs).toBe(1);
  });

  it('keys an SQS record handled alone by its messageId; the redelivery’s new receipt handle changes nothing', async () => {
    const messageId = randomUUID();
    const handler = mount<SQSEvent>({ key: 'Records[0].messageId' }, async (event, context) => {
      const { idem } = context as IdemLambdaContext<pg.PoolClient>;
      await idem!.tx.query(`INSERT INTO "${h.schema}".effects (key) VALUES ($1)`, [messageId]);
      return event.Records.length;
    });
    await handler({ Records: [sqsRecord(messageId, { n: 1 })] }, lambdaContext());
    await handler({ Records: [sqsRecord(messageId, { n: 1 }, { receiveCount: 2 })] }, lambdaContext());
    expect(await h.effects(messageId)).toBe(1);
  });

  it('a concurrent duplicate holding the key is waited for, then replayed (recording: claim)', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const first = new Promise<void>((resolve) => (started = resolve));
    const orderId = `order-${randomUUID()}`;
    const handler = mount<OrderPlaced>(
      { key: 'detail.orderId', recording: 'claim' },
      async (event, context) => {
        started();
        await held;
        return placeOrder()(event, context);
      },
    );
    const running = handler(orderPlaced(orderId), lambdaContext());
    await first;
    const duplicate = handler(orderPlaced(orderId), lambdaContext());
    release();
    const [a, b] = await Promise.all([running, duplicate]);
    expect(b).toEqual(a);
    expect(await h.effects(orderId)).toBe(1);
  });
});
