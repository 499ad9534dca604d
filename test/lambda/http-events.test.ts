/**
 * `idem/lambda` on HTTP events, through its function wrapper and as Middy middleware, against a
 * real PostgreSQL: API Gateway HTTP APIs (v2), REST APIs (v1), ALB (with and without multi-value
 * headers) and function URLs; the Idempotency-Key contract of `idem/http` on each, effects counted
 * as business rows.
 */
import { randomUUID } from 'node:crypto';
import type { APIGatewayProxyEventV2, Context } from 'aws-lambda';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { idempotency, type IdemLambdaContext, type LambdaIdempotencyOptions } from 'idem/lambda';
import {
  albEvent,
  apiGatewayV1Event,
  apiGatewayV2Event,
  useLambdaHarness,
  createOrder,
  functionUrlEvent,
  httpDrills,
  lambdaContext,
  mountings,
  withoutMarker,
  type Mounting,
  type OrderHandler,
} from '../support/lambda.js';

type Result = Record<string, unknown>;
const h = useLambdaHarness();

describe.each(Object.keys(mountings) as Mounting[])('HTTP events through idempotency() as %s', (mounting) => {
  const mount = <E>(
    options: Partial<LambdaIdempotencyOptions<pg.PoolClient, E>> = {},
    handler: OrderHandler = createOrder(h),
  ) =>
    mountings[mounting](
      idempotency<pg.PoolClient, E>({ idem: h.idem, singleTenant: true, ...options }),
      handler,
    );
  const invoke = async <E>(handler: (event: E, context: Context) => Promise<unknown>, event: E) =>
    (await handler(event, lambdaContext())) as Result;

  it('API Gateway HTTP API (v2): one row per key, the same response replayed, 422 on another body, one row of 20 concurrent', async () => {
    await httpDrills(h, mount(), apiGatewayV2Event, `v2-${mounting}`);
  });

  it('API Gateway REST API (v1): the same drills', async () => {
    await httpDrills(h, mount(), apiGatewayV1Event, `v1-${mounting}`);
  });

  it('ALB, without and with multi-value headers: the same drills, in the form the target group expects', async () => {
    await httpDrills(h, mount(), (request) => albEvent(request), `alb-${mounting}`);
    await httpDrills(h, mount(), (request) => albEvent(request, true), `alb-multi-${mounting}`);
    const result = await invoke(mount(), albEvent({ key: randomUUID(), body: { note: 'x' } }, true));
    expect(result).toMatchObject({ statusCode: 201, statusDescription: '201 Created' });
    expect(result.multiValueHeaders).toMatchObject({ 'content-type': ['application/json'] });
    expect(result.headers).toBeUndefined();
  });

  it('function URLs: the same drills; the operation is the method and the function name', async () => {
    await httpDrills(h, mount(), functionUrlEvent, `url-${mounting}`);
    const key = `url-operation-${randomUUID()}`;
    await invoke(mount(), functionUrlEvent({ key, body: { note: key } }));
    expect(await h.idem.get({ tenant: 'default', operation: 'POST create-order', key })).not.toBeNull();
  });

  it('names the operation after the route of API Gateway: POST /orders', async () => {
    const key = `route-${randomUUID()}`;
    await invoke(mount(), apiGatewayV2Event({ key, body: { note: key } }));
    await invoke(mount(), apiGatewayV1Event({ key, body: { note: key } }));
    // Both events name the same route: one intent.
    expect(await h.effects(key)).toBe(1);
    expect(await h.idem.get({ tenant: 'default', operation: 'POST /orders', key })).not.toBeNull();
  });

  it('replays a binary (base64) response as base64, byte for byte', async () => {
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0xff, 0x00]);
    const handler = mount({}, async (event, context) => {
      await createOrder(h)(event, context);
      return {
        statusCode: 200,
        headers: { 'content-type': 'image/png' },
        body: png.toString('base64'),
        isBase64Encoded: true,
      };
    });
    const key = `binary-${randomUUID()}`;
    const request = { key, body: { note: key }, base64: true };
    const first = await invoke(handler, apiGatewayV2Event(request));
    const second = await invoke(handler, apiGatewayV2Event(request));
    expect(first).toMatchObject({ statusCode: 200, isBase64Encoded: true, body: png.toString('base64') });
    expect(withoutMarker(second)).toEqual({ rest: first, marker: 'true' });
    expect(await h.effects(key)).toBe(1);
  });

  it('replays the stored headers only: cookies and per-request headers go with the first answer', async () => {
    const handler = mount({}, async (event, context) => {
      const created = await createOrder(h)(event, context);
      return {
        ...created,
        headers: { ...created.headers, 'x-request-id': context.awsRequestId },
        cookies: ['session=abc; HttpOnly'],
      };
    });
    const key = `cookies-${randomUUID()}`;
    const first = await invoke(handler, apiGatewayV2Event({ key, body: { note: key } }));
    const second = await invoke(handler, apiGatewayV2Event({ key, body: { note: key } }));
    expect(first.cookies).toEqual(['session=abc; HttpOnly']);
    expect(first.headers).toHaveProperty('x-request-id');
    expect(second.cookies).toBeUndefined();
    expect(second.headers).not.toHaveProperty('x-request-id');
    expect(second.headers).toMatchObject({
      location: (first.headers as Result).location,
      'idempotent-replayed': 'true',
    });
  });

  it('answers a v2 result without statusCode as API Gateway does (200, JSON), and replays it the same', async () => {
    const handler = mount({}, async (event, context) => {
      await createOrder(h)(event, context);
      return { accepted: true };
    });
    const key = `inferred-${randomUUID()}`;
    const first = await invoke(handler, apiGatewayV2Event({ key, body: { note: key } }));
    expect(first).toEqual({
      statusCode: 200,
      headers: { 'content-type': 'application/json' },
      body: '{"accepted":true}',
      isBase64Encoded: false,
    });
    const second = await invoke(handler, apiGatewayV2Event({ key, body: { note: key } }));
    expect(withoutMarker(second)).toEqual({ rest: first, marker: 'true' });
    expect(await h.effects(key)).toBe(1);
  });

  it('refuses a request without a key (400 key-missing) and a malformed JSON body (400), running nothing', async () => {
    let runs = 0;
    const handler = mount({}, async (event, context) => {
      runs++;
      return createOrder(h)(event, context);
    });
    const missing = await invoke(handler, apiGatewayV2Event({ body: { note: 'none' } }));
    expect(missing.statusCode).toBe(400);
    expect(JSON.parse(missing.body as string)).toMatchObject({ code: 'IDEM_KEY_MISSING' });
    const malformed = await invoke(handler, apiGatewayV2Event({ key: randomUUID(), body: '{"note":' }));
    expect(malformed.statusCode).toBe(400);
    expect(JSON.parse(malformed.body as string)).toMatchObject({ code: 'IDEM_BODY_MALFORMED' });
    const twoKeys = await invoke(handler, apiGatewayV2Event({ key: 'a, b', body: { note: 'x' } }));
    expect(JSON.parse(twoKeys.body as string)).toMatchObject({ code: 'IDEM_KEY_MULTIPLE' });
    expect(runs).toBe(0);
  });

  it('lets GET through without idempotency, and with required: false a request without a key', async () => {
    const seen: unknown[] = [];
    const spy = async (_event: unknown, context: IdemLambdaContext) => {
      seen.push(context.idem);
      return { statusCode: 200, body: 'ok' };
    };
    await invoke(mount({}, spy as never), apiGatewayV2Event({ method: 'GET', key: randomUUID() }));
    await invoke(mount({ required: false }, spy as never), apiGatewayV2Event({ body: { note: 'x' } }));
    expect(seen).toEqual([undefined, undefined]);
  });

  it('throws a failing handler’s error on, with its writes rolled back; the retry runs afresh', async () => {
    let fail = true;
    const handler = mount({}, async (event, context) => {
      await createOrder(h)(event, context);
      if (fail) throw new Error('downstream refused');
      return { statusCode: 201, body: 'created' };
    });
    const key = `throws-${randomUUID()}`;
    await expect(handler(apiGatewayV2Event({ key, body: { note: key } }), lambdaContext())).rejects.toThrow(
      'downstream refused',
    );
    expect(await h.effects(key)).toBe(0);
    fail = false;
    expect(await invoke(handler, apiGatewayV2Event({ key, body: { note: key } }))).toMatchObject({
      statusCode: 201,
    });
    expect(await h.effects(key)).toBe(1);
  });

  it('takes the key from the event with a path (Powertools’ eventKeyJmesPath), fingerprinting what `payload` selects', async () => {
    const handler = mount<APIGatewayProxyEventV2>({
      key: 'powertools_json(body).orderId',
      payload: 'powertools_json(body).total',
    });
    const orderId = `order-${randomUUID()}`;
    const event = (total: number) =>
      apiGatewayV2Event({ body: { orderId, total, note: `${orderId}-${total}` } });
    const first = await invoke(handler, event(40));
    // The note differs, the total does not: the same intent.
    const second = await invoke(handler, {
      ...event(40),
      body: JSON.stringify({ orderId, total: 40, note: 'retried' }),
    });
    expect(withoutMarker(second)).toEqual({ rest: first, marker: 'true' });
    expect(await h.idem.get({ tenant: 'default', operation: 'POST /orders', key: orderId })).not.toBeNull();
    expect((await invoke(handler, event(41))).statusCode).toBe(422);
    const noKey = await invoke(handler, apiGatewayV2Event({ body: { total: 1 } }));
    expect(JSON.parse(noKey.body as string)).toMatchObject({ code: 'IDEM_KEY_MISSING' });
  });

  it('shapes replays with mapReplay (Powertools’ responseHook)', async () => {
    const handler = mount({
      mapReplay: (result) => ({
        ...(result as Result),
        headers: { ...(result as { headers: object }).headers, 'x-cache': 'replay' },
      }),
    });
    const key = `hook-${randomUUID()}`;
    const first = await invoke(handler, apiGatewayV2Event({ key, body: { note: key } }));
    const second = await invoke(handler, apiGatewayV2Event({ key, body: { note: key } }));
    expect(first.headers).not.toHaveProperty('x-cache');
    expect(second.headers).toMatchObject({ 'x-cache': 'replay', 'idempotent-replayed': 'true' });
  });
});
