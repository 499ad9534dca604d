/**
 * For the tests of `idem/lambda`: real event shapes (API Gateway REST and HTTP APIs, ALB with and
 * without multi-value headers, function URLs, SQS), a Lambda context whose remaining time runs
 * down, a schema with a business table, and the drills of issue 28 ("what must hold"), run
 * directly and through PgBouncer in transaction mode. Effects are counted as rows of the business
 * table, never taken from what idem says it did.
 */
import { randomUUID } from 'node:crypto';
import type {
  ALBEvent,
  APIGatewayProxyEvent,
  APIGatewayProxyEventV2,
  Context,
  SQSEvent,
  SQSRecord,
} from 'aws-lambda';
import pg from 'pg';
import { afterAll, beforeAll, expect } from 'vitest';
import { createIdem, type Idem } from 'idem';
import { createInbox, type Inbox } from 'idem/inbox';
import { fromPg } from 'idem/pg';
import {
  createSqsBatchHandler,
  type IdemLambdaContext,
  type LambdaHandler,
  type LambdaIdempotency,
  type SqsBatchHandler,
} from 'idem/lambda';
import middy from '@middy/core';
import { createTestSchema, type TestSchema } from './database.js';
import { quietEvents } from './events.js';

export interface LambdaHarness {
  schema: string;
  /** The pool idem works through (direct, or through the pooler). */
  pool: pg.Pool;
  idem: Idem<pg.PoolClient>;
  inbox: Inbox<pg.PoolClient>;
  /** Business rows written for `key`. */
  effects(key: string): Promise<number>;
  close(): Promise<void>;
}

/**
 * A schema with idem's tables and `effects (key, note)`. With `url` (a pooler's), idem works
 * through a pool of its own on it, with `prepare: false`; the rows are counted directly.
 */
export async function createLambdaHarness(
  options: { url?: string; poolSize?: number } = {},
): Promise<LambdaHarness> {
  const db: TestSchema = await createTestSchema({ poolSize: options.poolSize ?? 10 });
  await db.pool.query(
    `CREATE TABLE "${db.schema}".effects (id serial PRIMARY KEY, key text NOT NULL, note text)`,
  );
  const pool = options.url
    ? new pg.Pool({ connectionString: options.url, max: options.poolSize ?? 10 })
    : db.pool;
  const sql = fromPg(pool, options.url ? { prepare: false } : {});
  return {
    schema: db.schema,
    pool,
    idem: createIdem({ sql, schema: db.schema }),
    inbox: createInbox({ sql, schema: db.schema }),
    async effects(key) {
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${db.schema}".effects WHERE key = $1`,
        [key],
      );
      return rows[0]!.n;
    },
    async close() {
      if (pool !== db.pool) await pool.end();
      await db.close();
    },
  };
}

/** A harness for the test file: made before its tests, closed after them. */
export function useLambdaHarness(): LambdaHarness {
  const h = {} as LambdaHarness;
  beforeAll(async () => {
    Object.assign(h, await createLambdaHarness());
  });
  afterAll(async () => {
    await h.close?.();
  });
  return h;
}

/** A Lambda context whose remaining time runs down from `remainingMs`. */
export function lambdaContext(remainingMs = 30_000, functionName = 'create-order'): Context {
  const deadline = Date.now() + remainingMs;
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:eu-west-1:123456789012:function:${functionName}`,
    memoryLimitInMB: '256',
    awsRequestId: randomUUID(),
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: '2026/01/01/[$LATEST]0123456789abcdef',
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done() {},
    fail() {},
    succeed() {},
  };
}

export interface HttpRequest {
  key?: string;
  body?: unknown;
  method?: string;
  /** Sent base64-encoded, as API Gateway sends a binary media type. */
  base64?: boolean;
  headers?: Record<string, string>;
}

const bodyOf = (request: HttpRequest) => {
  if (request.body === undefined) return null;
  const text = typeof request.body === 'string' ? request.body : JSON.stringify(request.body);
  return request.base64 ? Buffer.from(text).toString('base64') : text;
};
const headersOf = (request: HttpRequest, keyHeader = 'Idempotency-Key'): Record<string, string> => ({
  'Content-Type': 'application/json',
  Host: 'abc123.execute-api.eu-west-1.amazonaws.com',
  'User-Agent': 'curl/8.5.0',
  'X-Amzn-Trace-Id': `Root=1-${randomUUID()}`,
  ...(request.key === undefined ? {} : { [keyHeader]: request.key }),
  ...request.headers,
});
const lowerCase = (headers: Record<string, string>) =>
  Object.fromEntries(Object.entries(headers).map(([name, value]) => [name.toLowerCase(), value]));

/** An HTTP API (payload format 2.0) event for `POST /orders`: each call a new request id. */
export function apiGatewayV2Event(request: HttpRequest = {}): APIGatewayProxyEventV2 {
  const method = request.method ?? 'POST';
  return {
    version: '2.0',
    routeKey: `${method} /orders`,
    rawPath: '/orders',
    rawQueryString: 'source=app',
    headers: lowerCase(headersOf(request)),
    queryStringParameters: { source: 'app' },
    requestContext: {
      accountId: '123456789012',
      apiId: 'abc123',
      domainName: 'abc123.execute-api.eu-west-1.amazonaws.com',
      domainPrefix: 'abc123',
      http: { method, path: '/orders', protocol: 'HTTP/1.1', sourceIp: '192.0.2.1', userAgent: 'curl/8.5.0' },
      requestId: randomUUID(),
      routeKey: `${method} /orders`,
      stage: '$default',
      time: new Date().toUTCString(),
      timeEpoch: Date.now(),
    },
    ...(bodyOf(request) === null ? {} : { body: bodyOf(request)! }),
    isBase64Encoded: request.base64 === true,
  };
}

/** A function URL event: payload format 2.0, route `$default`, a `lambda-url` domain. */
export function functionUrlEvent(request: HttpRequest = {}): APIGatewayProxyEventV2 {
  const event = apiGatewayV2Event(request);
  const domainName = 'abcdefghijklmnop.lambda-url.eu-west-1.on.aws';
  return {
    ...event,
    routeKey: '$default',
    headers: { ...event.headers, host: domainName },
    requestContext: {
      ...event.requestContext,
      routeKey: '$default',
      domainName,
      domainPrefix: 'abcdefghijklmnop',
    },
  };
}

/** A REST API (payload format 1.0) event for `POST /orders`. */
export function apiGatewayV1Event(request: HttpRequest = {}): APIGatewayProxyEvent {
  const method = request.method ?? 'POST';
  const headers = headersOf(request);
  return {
    resource: '/orders',
    path: '/orders',
    httpMethod: method,
    headers,
    multiValueHeaders: Object.fromEntries(Object.entries(headers).map(([name, value]) => [name, [value]])),
    queryStringParameters: { source: 'app' },
    multiValueQueryStringParameters: { source: ['app'] },
    pathParameters: null,
    stageVariables: null,
    requestContext: {
      accountId: '123456789012',
      apiId: 'abc123',
      authorizer: {},
      protocol: 'HTTP/1.1',
      httpMethod: method,
      identity: {
        accessKey: null,
        accountId: null,
        apiKey: null,
        apiKeyId: null,
        caller: null,
        clientCert: null,
        cognitoAuthenticationProvider: null,
        cognitoAuthenticationType: null,
        cognitoIdentityId: null,
        cognitoIdentityPoolId: null,
        principalOrgId: null,
        sourceIp: '192.0.2.1',
        user: null,
        userAgent: 'curl/8.5.0',
        userArn: null,
      },
      path: '/prod/orders',
      stage: 'prod',
      requestId: randomUUID(),
      requestTimeEpoch: Date.now(),
      resourceId: 'r3s0urc3',
      resourcePath: '/orders',
    },
    body: bodyOf(request),
    isBase64Encoded: request.base64 === true,
  };
}

/** An ALB target event, with multi-value headers on the target group or not. */
export function albEvent(request: HttpRequest = {}, multiValue = false): ALBEvent {
  const headers = lowerCase(headersOf(request));
  const base = {
    requestContext: {
      elb: {
        targetGroupArn:
          'arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/orders/0123456789abcdef',
      },
    },
    httpMethod: request.method ?? 'POST',
    path: '/orders',
    body: bodyOf(request),
    isBase64Encoded: request.base64 === true,
  };
  return multiValue
    ? {
        ...base,
        multiValueQueryStringParameters: { source: ['app'] },
        multiValueHeaders: Object.fromEntries(
          Object.entries(headers).map(([name, value]) => [name, [value]]),
        ),
      }
    : { ...base, queryStringParameters: { source: 'app' }, headers };
}

/** A record of a standard queue (or a FIFO one), as the event source mapping delivers it. */
export function sqsRecord(
  messageId: string,
  body: unknown,
  options: { fifo?: boolean; receiveCount?: number } = {},
): SQSRecord {
  const queue = options.fifo ? 'orders.fifo' : 'orders';
  return {
    messageId,
    receiptHandle: `AQEB${randomUUID()}`,
    body: typeof body === 'string' ? body : JSON.stringify(body),
    attributes: {
      ApproximateReceiveCount: String(options.receiveCount ?? 1),
      SentTimestamp: String(Date.now()),
      SenderId: 'AIDAIENQZJOLO23YVJ4VO',
      ApproximateFirstReceiveTimestamp: String(Date.now()),
      ...(options.fifo ? { MessageGroupId: 'orders', MessageDeduplicationId: messageId } : {}),
    },
    messageAttributes: {},
    md5OfBody: '0123456789abcdef0123456789abcdef',
    eventSource: 'aws:sqs',
    eventSourceARN: `arn:aws:sqs:eu-west-1:123456789012:${queue}`,
    awsRegion: 'eu-west-1',
  };
}

/**
 * A result without the replay marker, and the marker: from `headers`, or from `multiValueHeaders`
 * (an ALB target group with multi-value headers), where it is `['true']`.
 */
export function withoutMarker(result: Record<string, unknown>): {
  rest: Record<string, unknown>;
  marker: unknown;
} {
  const field = 'multiValueHeaders' in result ? 'multiValueHeaders' : 'headers';
  const { 'idempotent-replayed': found, ...headers } = (result[field] ?? {}) as Record<string, unknown>;
  const marker: unknown = Array.isArray(found) && found.length === 1 ? (found as unknown[])[0] : found;
  return { rest: { ...result, [field]: headers }, marker };
}

type Result = Record<string, unknown>;

/**
 * The HTTP drills on one event shape (`event` builds it, each call a new request id): the same
 * key twice gives one row and the same response (status, headers, body, `isBase64Encoded`) with
 * the replay marker; the same key with another body 422; 20 concurrent invocations one row.
 * `handler` is `createOrder` behind `idempotency`.
 */
export async function httpDrills<E>(
  h: LambdaHarness,
  handler: (event: E, context: Context) => Promise<unknown>,
  event: (request: HttpRequest) => E,
  prefix: string,
): Promise<void> {
  const invoke = async (request: HttpRequest) => (await handler(event(request), lambdaContext())) as Result;
  const key = `${prefix}-${randomUUID()}`;
  const first = await invoke({ key, body: { note: key, total: 40 } });
  expect(first.statusCode).toBe(201);
  expect(first.isBase64Encoded).toBe(false);
  expect(withoutMarker(first).marker).toBeUndefined();
  // The retry is another request (its own request id, trace header), its body's keys reordered.
  const second = await invoke({ key, body: { total: 40, note: key } });
  const { rest, marker } = withoutMarker(second);
  expect(marker).toBe('true');
  expect(rest).toEqual(first);
  expect(await h.effects(key)).toBe(1);

  const other = await invoke({ key, body: { note: key, total: 41 } });
  expect(other.statusCode).toBe(422);
  expect(JSON.parse(other.body as string)).toMatchObject({ code: 'IDEM_KEY_REUSED', status: 422 });
  expect(await h.effects(key)).toBe(1);

  const concurrent = `${prefix}-concurrent-${randomUUID()}`;
  const results = await Promise.all(
    Array.from({ length: 20 }, () => invoke({ key: concurrent, body: { note: concurrent, total: 7 } })),
  );
  expect(await h.effects(concurrent)).toBe(1);
  expect(results.map((r) => r.statusCode)).toEqual(Array(20).fill(201));
  expect(new Set(results.map((r) => r.body)).size).toBe(1);
  expect(results.filter((r) => withoutMarker(r).marker === 'true')).toHaveLength(19);
}

/**
 * The SQS drill: 10 messages, one id carried by 3 of them (8 distinct ids), one message whose
 * handler throws: 7 effects, `batchItemFailures` naming exactly the failing one; the same batch
 * redelivered adds nothing; once the handler is fixed the failed one takes effect once.
 * `handler` writes one `effects` row per run, keyed by the body's `key`, and throws for `fail`.
 */
export async function sqsBatchDrills(h: LambdaHarness, prefix: string): Promise<void> {
  const run = `${prefix}-${randomUUID()}`;
  const ids = Array.from({ length: 8 }, (_, i) => `${run}-m${i}`);
  // Ten records: m0…m7, with m2 delivered three times (two copies), m5's handler throws.
  const order = [0, 1, 2, 3, 2, 4, 5, 6, 2, 7];
  const batch = (): SQSEvent => ({
    Records: order.map((i) => sqsRecord(ids[i]!, { key: ids[i], fail: i === 5 })),
  });
  let failing = true;
  const handler = billing(h, () => failing);
  const total = async () => (await Promise.all(ids.map((id) => h.effects(id)))).reduce((a, b) => a + b, 0);

  const first = await handler(batch(), lambdaContext());
  expect(first.batchItemFailures).toEqual([{ itemIdentifier: ids[5] }]);
  expect(await total()).toBe(7);
  for (const [i, id] of ids.entries()) expect(await h.effects(id), id).toBe(i === 5 ? 0 : 1);

  const redelivered = await handler(batch(), lambdaContext());
  expect(redelivered.batchItemFailures).toEqual([{ itemIdentifier: ids[5] }]);
  expect(await total()).toBe(7);

  failing = false;
  const fixed = await handler(batch(), lambdaContext());
  expect(fixed.batchItemFailures).toEqual([]);
  expect(await total()).toBe(8);
  expect(await h.effects(ids[5]!)).toBe(1);
}

/** The order handler: one `effects` row per run (key, the body's `note`), answered 201 with a Location. */
export function createOrder(h: LambdaHarness) {
  return async (
    event: { body?: string | null; isBase64Encoded?: boolean },
    context: IdemLambdaContext<pg.PoolClient, Context>,
  ) => {
    const text = event.isBase64Encoded
      ? Buffer.from(event.body ?? '', 'base64').toString()
      : (event.body ?? '{}');
    const body = JSON.parse(text) as { note?: string; total?: number };
    const idem = context.idem!;
    const { rows } = await idem.tx.query<{ id: number }>(
      `INSERT INTO "${h.schema}".effects (key, note) VALUES ($1, $2) RETURNING id`,
      [idem.key, body.note ?? null],
    );
    const id = rows[0]!.id;
    return {
      statusCode: 201,
      headers: { 'Content-Type': 'application/json', Location: `/orders/${id}` },
      body: JSON.stringify({ id, total: body.total }),
    };
  };
}

/** A handler of HTTP events behind `idempotency` (`createOrder`, or a test's own). */
export type OrderHandler = (
  event: { body?: string | null; isBase64Encoded?: boolean },
  context: IdemLambdaContext<pg.PoolClient, Context>,
) => Promise<unknown>;

/** The two ways to mount `idempotency`: its function wrapper, and as Middy middleware. */
export const mountings = {
  wrapper: <E>(idempotent: LambdaIdempotency<pg.PoolClient, E>, handler: OrderHandler) =>
    idempotent.handler(handler as LambdaHandler<E, unknown, IdemLambdaContext<pg.PoolClient, Context>>),
  middy: <E>(idempotent: LambdaIdempotency<pg.PoolClient, E>, handler: OrderHandler) =>
    middy(handler as unknown as (event: E, context: Context) => Promise<unknown>, {
      timeoutEarlyInMillis: 0,
    }).use(idempotent) as unknown as (event: E, context: Context) => Promise<unknown>,
};
export type Mounting = keyof typeof mountings;

/** The billing consumer: one `effects` row per message (the body's `key`); throws for `fail` while `failing()`. */
export function billing(h: LambdaHarness, failing: () => boolean = () => false): SqsBatchHandler<SQSRecord> {
  return createSqsBatchHandler({
    inbox: h.inbox,
    consumer: 'billing',
    events: quietEvents(),
    handler: async (tx, record: SQSRecord) => {
      const body = JSON.parse(record.body) as { key: string; fail?: boolean };
      if (body.fail && failing()) throw new Error('card declined');
      await tx.query(`INSERT INTO "${h.schema}".effects (key, note) VALUES ($1, 'sqs')`, [body.key]);
    },
  });
}
