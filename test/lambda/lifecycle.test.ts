/**
 * Lambda's lifecycle: the pool and idem are made once per container, outside the handler, and
 * the wrappers start nothing (no connection until an invocation, no timer or interval at any time,
 * so a frozen container has nothing pending); every wait for a concurrent duplicate is bounded by
 * `context.getRemainingTimeInMillis()` less `reserveMs`.
 */
import { randomUUID } from 'node:crypto';
import type { Context } from 'aws-lambda';
import pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import { createIdem, isInProgress, type Idem, type OperationSpec, type Sql } from 'idem';
import { createInbox } from 'idem/inbox';
import { createSqsBatchHandler, idempotency, type IdemLambdaContext } from 'idem/lambda';
import { fromPg } from 'idem/pg';
import { databaseUrl } from '../support/database.js';
import {
  apiGatewayV2Event,
  useLambdaHarness,
  createOrder,
  lambdaContext,
  sqsRecord,
  withoutMarker,
} from '../support/lambda.js';

const h = useLambdaHarness();

const realSetTimeout = globalThis.setTimeout;

/** The same `Idem`, recording the spec of every `run`. */
function recordingSpecs(idem: Idem<pg.PoolClient>, specs: OperationSpec[]): Idem<pg.PoolClient> {
  return new Proxy(idem, {
    get(target, property) {
      if (property === 'run') {
        return (spec: OperationSpec, handler: Parameters<Idem<pg.PoolClient>['run']>[1]) => {
          specs.push(spec);
          return target.run(spec, handler);
        };
      }
      const value = Reflect.get(target, property, target) as unknown;
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** A gate a handler waits at until the test opens it; `reached` resolves when it got there. */
function gate() {
  let open!: () => void;
  let arrive!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  const reached = new Promise<void>((resolve) => (arrive = resolve));
  return { open, reached, wait: () => (arrive(), opened) };
}

describe('the Lambda lifecycle', () => {
  it('makes nothing run until the first invocation: no query, no connection, no timer', async () => {
    let statements = 0;
    const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
    const base = fromPg(pool);
    const sql: Sql<pg.PoolClient> = {
      query: (text, params, options) => (statements++, base.query(text, params, options)),
      transaction: (fn) => (statements++, base.transaction(fn)),
    };
    const before = process.getActiveResourcesInfo().length;
    const idem = createIdem({ sql, schema: h.schema });
    idempotency({ idem, singleTenant: true });
    idempotency({ idem, singleTenant: true, key: 'detail.id' }).handler(async () => 'x');
    createSqsBatchHandler({
      inbox: createInbox({ sql, schema: h.schema }),
      consumer: 'billing',
      handler: async () => {},
    });
    expect(statements).toBe(0);
    expect(pool.totalCount).toBe(0);
    expect(process.getActiveResourcesInfo().length).toBe(before);
    await pool.end();
  });

  it('starts no timer or interval: after invocations of every kind, nothing of idem’s is pending', async () => {
    // One pool for the container, made outside the handler, of one connection (as a Lambda's is).
    const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
    const idem = createIdem({ sql: fromPg(pool), schema: h.schema });
    const pids = new Set<number>();
    const http = idempotency({ idem, singleTenant: true }).handler(
      async (event: { body?: string }, context: IdemLambdaContext<pg.PoolClient, Context>) => {
        const { rows } = await context.idem!.tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
        pids.add(rows[0]!.pid);
        return createOrder(h)(event, context);
      },
    );
    const keyed = idempotency({ idem, singleTenant: true, key: 'id' }).handler(async () => ({ ok: true }));
    const sqs = createSqsBatchHandler({
      inbox: createInbox({ sql: fromPg(pool), schema: h.schema }),
      consumer: 'lifecycle',
      handler: async () => {},
    });
    await pool.query('SELECT 1'); // the connection the container keeps
    const pending = () =>
      process.getActiveResourcesInfo().filter((r) => r === 'Timeout' || r === 'Immediate');
    const before = pending();
    const intervals = vi.spyOn(globalThis, 'setInterval');
    // Timers set by idem's own code: the caller of setTimeout is a module of src/ (node-postgres'
    // idle timer of the pool, set when idem releases a connection, is the pool's).
    const fromIdem: string[] = [];
    const timeouts = vi
      .spyOn(globalThis, 'setTimeout')
      .mockImplementation((...args: Parameters<typeof setTimeout>) => {
        const frames = (new Error().stack ?? '').split('\n');
        const caller = frames[frames.findIndex((frame) => frame.includes('@vitest/spy')) + 1] ?? '';
        if (caller.includes('/src/')) fromIdem.push(caller);
        return realSetTimeout(...args);
      });
    try {
      const key = `life-${randomUUID()}`;
      for (let i = 0; i < 3; i++) {
        await http(apiGatewayV2Event({ key, body: { note: key } }), lambdaContext());
        await keyed({ id: key }, lambdaContext());
        await sqs({ Records: [sqsRecord(key, { key })] }, lambdaContext());
      }
      await new Promise((resolve) => setImmediate(resolve));
      expect(intervals).not.toHaveBeenCalled();
      expect(fromIdem).toEqual([]);
      expect(pending().length).toBeLessThanOrEqual(before.length);
      // Every invocation used the container's one connection.
      expect(pids.size).toBe(1);
      expect(pool.totalCount).toBe(1);
    } finally {
      intervals.mockRestore();
      timeouts.mockRestore();
      await pool.end();
    }
  });

  it('bounds the wait for a concurrent duplicate by the remaining time less reserveMs', async () => {
    const specs: OperationSpec[] = [];
    const idem = recordingSpecs(h.idem, specs);
    const http = idempotency({ idem, singleTenant: true }).handler(createOrder(h));
    const keyed = idempotency({ idem, singleTenant: true, key: 'id', reserveMs: 200 }).handler(async () => 1);
    const capped = idempotency({ idem, singleTenant: true, key: 'id', waitMs: 800 }).handler(async () => 1);
    const waits = async (run: () => Promise<unknown>) => {
      specs.length = 0;
      await run();
      return specs.map((s) => s.waitMs);
    };
    const post = () => {
      const key = randomUUID();
      return apiGatewayV2Event({ key, body: { note: key } });
    };
    // The instance's own wait (5000 ms, no override) while the invocation has more time than that;
    // then what is left, less 500 ms.
    expect(await waits(() => http(post(), lambdaContext(60_000)))).toEqual([undefined]);
    expect(await waits(() => keyed({ id: randomUUID() }, lambdaContext(60_000)))).toEqual([5000]);
    const left = (await waits(() => http(post(), lambdaContext(2_000))))[0]!;
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThanOrEqual(1_500);
    expect(await waits(() => http(post(), lambdaContext(400)))).toEqual([0]);
    expect(await waits(() => keyed({ id: randomUUID() }, lambdaContext(150)))).toEqual([0]);
    expect(await waits(() => capped({ id: randomUUID() }, lambdaContext(60_000)))).toEqual([800]);
  });

  it('answers a duplicate 409 at once when its invocation has no time to wait, and replays to one that has', async () => {
    const held = gate();
    const handler = idempotency({ idem: h.idem, singleTenant: true, recording: 'claim' }).handler(
      async (event: { body?: string }, context: IdemLambdaContext<pg.PoolClient, Context>) => {
        await held.wait();
        return createOrder(h)(event, context);
      },
    );
    const key = `held-${randomUUID()}`;
    const event = () => apiGatewayV2Event({ key, body: { note: key } });
    const holder = handler(event(), lambdaContext());
    await held.reached; // the key is claimed, its transaction open
    const hurried = (await handler(event(), lambdaContext(500))) as Record<string, unknown>;
    expect(hurried.statusCode).toBe(409);
    expect(JSON.parse(hurried.body as string)).toMatchObject({ code: 'IDEM_IN_PROGRESS', retryable: true });
    const patient = handler(event(), lambdaContext(60_000));
    held.open();
    const [first, replay] = (await Promise.all([holder, patient])) as Record<string, unknown>[];
    expect(withoutMarker(replay!)).toEqual({ rest: first, marker: 'true' });
    expect(await h.effects(key)).toBe(1);
  });

  it('throws InProgressError for a keyed event whose invocation has no time to wait', async () => {
    const held = gate();
    const handler = idempotency({ idem: h.idem, singleTenant: true, key: 'id', recording: 'claim' }).handler(
      async () => {
        await held.wait();
        return 'done';
      },
    );
    const id = randomUUID();
    const holder = handler({ id }, lambdaContext());
    await held.reached;
    await expect(handler({ id }, lambdaContext(100))).rejects.toSatisfy(isInProgress);
    held.open();
    expect(await holder).toBe('done');
  });

  it('bounds the business transaction by the deadline, and only the transaction', async () => {
    // One connection, so that the statement after the invocation runs where the transaction did.
    const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
    const idem = createIdem({ sql: fromPg(pool), schema: h.schema });
    const settings = async (db: Pick<Sql<pg.PoolClient>, 'query'>) => {
      const { rows } = await db.query<{ statement: string; idle: string }>(
        `SELECT current_setting('statement_timeout') AS statement,
                current_setting('idle_in_transaction_session_timeout') AS idle`,
      );
      return rows[0]!;
    };
    const outside = await settings(fromPg(pool));
    const seen: { statement: string; idle: string }[] = [];
    const http = idempotency({ idem, singleTenant: true }).handler(
      async (_event: unknown, context: IdemLambdaContext<pg.PoolClient, Context>) => {
        seen.push(await settings(context.idem!.tx));
        return { statusCode: 201, body: 'ok' };
      },
    );
    const keyed = idempotency({ idem, singleTenant: true, key: 'id' }).handler(
      async (_event: unknown, context: IdemLambdaContext<pg.PoolClient, Context>) => {
        seen.push(await settings(context.idem!.tx));
        return 'ok';
      },
    );
    const unbounded = idempotency({ idem, singleTenant: true, key: 'id', boundByDeadline: false }).handler(
      async (_event: unknown, context: IdemLambdaContext<pg.PoolClient, Context>) => {
        seen.push(await settings(context.idem!.tx));
        return 'ok';
      },
    );
    const sqs = createSqsBatchHandler({
      inbox: createInbox({ sql: fromPg(pool), schema: h.schema }),
      consumer: 'lifecycle-bounds',
      handler: async (tx) => void seen.push(await settings(tx)),
    });
    const key = randomUUID();
    await http(apiGatewayV2Event({ key, body: { note: key } }), lambdaContext(5_000));
    await keyed({ id: randomUUID() }, lambdaContext(5_000));
    await sqs({ Records: [sqsRecord(randomUUID(), {})] }, lambdaContext(5_000));
    await unbounded({ id: randomUUID() }, lambdaContext(5_000));
    await keyed({ id: randomUUID() }, lambdaContext(60_000));
    const ms = (value: string) =>
      value.endsWith('ms') ? Number(value.slice(0, -2)) : Number(value.slice(0, -1)) * 1000;
    for (const bounded of seen.slice(0, 3)) {
      // The remaining time (5 s, less what the invocation used so far) less reserveMs (500 ms).
      expect(ms(bounded.statement)).toBeGreaterThan(0);
      expect(ms(bounded.statement)).toBeLessThanOrEqual(4_500);
      expect(ms(bounded.idle)).toBeGreaterThan(ms(bounded.statement));
      expect(ms(bounded.idle)).toBeLessThanOrEqual(5_000);
    }
    // Without the bound: the adapter's own transaction bounds (10 s and 15 s by default).
    expect(seen[3]).toEqual({ statement: '10s', idle: '15s' });
    // With more time left than those, the tighter ones are kept.
    expect(seen[4]).toEqual(seen[3]);
    // SET LOCAL: the pooled connection is handed back as it was.
    expect(await settings(fromPg(pool))).toEqual(outside);
    await pool.end();
  });

  it('fails a statement stuck behind a lock before the deadline: the writes roll back and the key stays free', async () => {
    const key = `locked-${randomUUID()}`;
    await h.pool.query(`INSERT INTO "${h.schema}".effects (key, note) VALUES ($1, 'lock')`, [key]);
    const blocker = new pg.Client({ connectionString: databaseUrl() });
    await blocker.connect();
    await blocker.query('BEGIN');
    await blocker.query(`SELECT 1 FROM "${h.schema}".effects WHERE key = $1 AND note = 'lock' FOR UPDATE`, [
      key,
    ]);
    const handler = idempotency({ idem: h.idem, singleTenant: true }).handler(
      async (event: { body?: string | null }, context: IdemLambdaContext<pg.PoolClient, Context>) => {
        const tx = context.idem!.tx;
        await tx.query(`INSERT INTO "${h.schema}".effects (key, note) VALUES ($1, 'order')`, [key]);
        await tx.query(`SELECT 1 FROM "${h.schema}".effects WHERE key = $1 AND note = 'lock' FOR UPDATE`, [
          key,
        ]);
        return createOrder(h)(event, context);
      },
    );
    const event = () => apiGatewayV2Event({ key, body: { note: key } });
    // 1.5 s left, 0.5 s kept back: the lock wait is cancelled after about a second (57014), while
    // the function can still answer; without the bound it would wait for the blocker, past the deadline.
    await expect(handler(event(), lambdaContext(1_500))).rejects.toMatchObject({ code: '57014' });
    await blocker.query('ROLLBACK');
    await blocker.end();
    expect(await h.effects(key)).toBe(1); // the blocker's row only
    const retried = (await handler(event(), lambdaContext())) as Record<string, unknown>;
    expect(retried.statusCode).toBe(201);
    expect((retried.headers as Record<string, string>)['Idempotent-Replayed']).toBeUndefined();
  });

  it('the SQS consumer’s remaining-time check leaves the rest of a batch for redelivery', async () => {
    const run = randomUUID();
    let remaining = 10_000;
    const context = { ...lambdaContext(), getRemainingTimeInMillis: () => remaining };
    const records = [0, 1, 2].map((i) => sqsRecord(`${run}-${i}`, { key: `${run}-${i}` }));
    // The first message uses the time up: the others are not started.
    const slow = createSqsBatchHandler({
      inbox: h.inbox,
      consumer: 'lifecycle-time',
      handler: async (tx, record) => {
        const { key } = JSON.parse(record.body) as { key: string };
        await tx.query(`INSERT INTO "${h.schema}".effects (key) VALUES ($1)`, [key]);
        remaining = 100;
      },
    });
    const result = await slow({ Records: records }, context);
    expect(result.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([`${run}-1`, `${run}-2`]);
    expect(await h.effects(`${run}-0`)).toBe(1);
    expect(await h.effects(`${run}-1`)).toBe(0);
  });
});
