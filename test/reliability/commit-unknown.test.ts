/**
 * Connection loss inside a transaction, including the case where the outcome of COMMIT is unknown
 * to the client. A TCP proxy between node-postgres and PostgreSQL cuts the connection around the
 * COMMIT message: after PostgreSQL committed (the answer is lost) or before it saw COMMIT (it rolls
 * back). Either way the client sees the same error, and the retry with the same key resolves it:
 * the stored result when the first attempt committed, a fresh run when it did not, and one effect.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import {
  classifyFailure,
  createEvents,
  createIdem,
  type Idem,
  isCommitOutcomeUnknown,
  isOperationFailed,
  isRetryable,
  type Queryable,
} from 'idem';
import { idempotency as nodeIdempotency } from 'idem/node-http';
import { countRows, createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { createEffects, effectsOf } from '../support/faults/effects.js';
import { startPgProxyTo, type CutMode, type PgProxy } from '../support/faults/pg-proxy.js';
import { waitFor } from '../support/poll.js';

let db: TestSchema;
let proxy: PgProxy;
let viaProxy: pg.Pool;
let idem: Idem;

beforeAll(async () => {
  db = await createTestSchema();
  await createEffects(db.pool, db.schema);
  proxy = await startPgProxyTo(databaseUrl());
  viaProxy = new pg.Pool({ connectionString: proxy.url(databaseUrl()), max: 4 });
  // A pool must survive a connection dying under it: idle clients report here.
  viaProxy.on('error', () => undefined);
  idem = createIdem({ sql: fromPg(viaProxy), schema: db.schema });
});

afterAll(async () => {
  await viaProxy.end();
  await proxy.close();
  await db.close();
});

const charge = async (tx: Queryable, key: string, amount: number) => {
  await tx.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, $2)`, [key, amount]);
  return { charged: amount, key };
};
const pay = (key: string, amount: number) =>
  idem.run({ tenant: 'acme', operation: 'charge', key, request: { amount } }, (tx) =>
    charge(tx, key, amount),
  );
/** The same intent with no retry of its own: the unknown outcome reaches the caller. */
const payOnce = (key: string, amount: number) =>
  idem.run({ tenant: 'acme', operation: 'charge', key, request: { amount }, transactionRetries: 0 }, (tx) =>
    charge(tx, key, amount),
  );

describe('an unknown COMMIT outcome is resolved by the retry with the same key', () => {
  const cases: { mode: CutMode; reset: boolean; committed: boolean }[] = [
    { mode: 'lose-answer', reset: false, committed: true },
    { mode: 'lose-answer', reset: true, committed: true },
    { mode: 'drop-commit', reset: false, committed: false },
    { mode: 'drop-commit', reset: true, committed: false },
  ];
  for (const { mode, reset, committed } of cases) {
    it(`${mode} (${reset ? 'RST' : 'FIN'}): run resolves it itself by reading the key: ${committed ? 'the stored result' : 'one fresh run'}`, async () => {
      const key = `k-${randomUUID()}`;
      const cut = proxy.cutNextCommit(mode, { reset });
      const result = await pay(key, 700);
      await cut;
      // Its own attempt committed: the next one found the record and answered from it.
      expect(result.replayed).toBe(committed);
      expect(result.value).toEqual({ charged: 700, key });
      expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
    });

    it(`${mode} (${reset ? 'RST' : 'FIN'}), no retries left: a typed, retryable error, then ${committed ? 'the stored result' : 'one fresh run'}`, async () => {
      const key = `k-${randomUUID()}`;
      const cut = proxy.cutNextCommit(mode, { reset });
      const error = await payOnce(key, 700).then(
        () => undefined,
        (e: unknown) => e,
      );
      await cut;
      // The client cannot tell whether it committed: it must be told to retry with the same key.
      expect(isCommitOutcomeUnknown(error)).toBe(true);
      expect(isRetryable(error)).toBe(true);
      expect(classifyFailure(error).kind).toBe('unknown-outcome');
      expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(committed ? 1 : 0);

      const retry = await pay(key, 700);
      expect(retry.replayed).toBe(committed);
      expect(retry.value).toEqual({ charged: 700, key });
      expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
    });
  }

  it('a multi-step operation whose step COMMIT answer is lost resumes without running the step again', async () => {
    const key = `s-${randomUUID()}`;
    let calls = 0;
    const run = () =>
      idem.steps({ tenant: 'acme', operation: 'steps-charge', key, request: { amount: 5 } }, async (op) => {
        const first = await op.step('record', async (tx) => {
          calls++;
          await tx.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, 5)`, [key]);
          return { recorded: true };
        });
        return { first, fence: op.fence };
      });
    const cut = proxy.cutNextCommit('lose-answer');
    const error = await run().then(
      () => undefined,
      (e: unknown) => e,
    );
    await cut;
    expect(isRetryable(error)).toBe(true);
    const retry = await run();
    expect(retry.value.first).toEqual({ recorded: true });
    expect(calls).toBe(1); // the recorded step was not run again
    expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
  });

  it('a backend terminated mid-transaction (pg_terminate_backend) rolls back; the retry runs once', async () => {
    const key = `t-${randomUUID()}`;
    let attempt = 0;
    const run = () =>
      idem.run(
        { tenant: 'acme', operation: 'terminate', key, request: {}, transactionRetries: 0 },
        async (tx) => {
          attempt++;
          await tx.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, 1)`, [key]);
          if (attempt === 1) {
            const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
            await db.pool.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
            // pg_terminate_backend only signals: wait until the backend is gone, or on a busy machine
            // `SELECT 1` can still be answered and the loss is met at COMMIT instead (commit unknown).
            await waitFor(
              async () =>
                (await countRows(db.pool, 'SELECT count(*) AS n FROM pg_stat_activity WHERE pid = $1', [
                  rows[0]!.pid,
                ])) === 0,
              'the terminated backend to exit',
            );
            await tx.query('SELECT 1'); // the connection is gone: this fails
          }
          return { attempt };
        },
      );
    const error = await run().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isOperationFailed(error), String(error)).toBe(true);
    expect(isRetryable(error)).toBe(true);
    expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(0);
    expect(await idem.get({ tenant: 'acme', operation: 'terminate', key })).toBeNull();
    const retry = await run();
    expect(retry).toMatchObject({ replayed: false, value: { attempt: 2 } });
    expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
  });
});

describe('over HTTP (node:http integration)', () => {
  let server: Server;
  let base: string;

  beforeAll(async () => {
    // The failures these tests provoke are the point: none is written to stderr.
    const quiet = createEvents();
    quiet.on('error', () => undefined);
    const handler = nodeIdempotency({
      idem,
      tenant: () => 'acme',
      route: '/payments',
      events: quiet,
      handler: async (req, res) => {
        const { key, amount } = req.body as { key: string; amount: number };
        await req.idem!.tx.query(`INSERT INTO "${db.schema}".effects (key, amount) VALUES ($1, $2)`, [
          key,
          amount,
        ]);
        res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ key, amount }));
      },
    });
    server = createServer((req, res) => void handler(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const post = (key: string) =>
    fetch(`${base}/payments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ key, amount: 42 }),
    });

  it('lose-answer: the request reads its own committed record and answers it (201, replayed), one effect', async () => {
    const key = `h-${randomUUID()}`;
    const cut = proxy.cutNextCommit('lose-answer');
    const first = await post(key);
    await cut;
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBe('true');
    expect(await first.json()).toEqual({ key, amount: 42 });
    const retry = await post(key);
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ key, amount: 42 });
    expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
  });

  for (const { mode, committed } of [{ mode: 'drop-commit' as const, committed: false }]) {
    it(`${mode}: 503 with Retry-After and nothing sent from the handler; the retry answers 201, one effect`, async () => {
      const key = `h-${randomUUID()}`;
      const cut = proxy.cutNextCommit(mode);
      const first = await post(key);
      await cut;
      expect(first.status).toBe(503);
      expect(first.headers.get('content-type')).toContain('application/problem+json');
      expect(first.headers.get('retry-after')).not.toBeNull();
      expect((await first.json()) as { code: string }).toMatchObject({ code: 'IDEM_COMMIT_FAILED' });

      const retry = await post(key);
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe(committed ? 'true' : null);
      expect(await retry.json()).toEqual({ key, amount: 42 });
      expect((await effectsOf(db.pool, db.schema, [key])).get(key)).toBe(1);
    });
  }
});
