/**
 * A claims task run on a node-postgres pool in pipeline mode opens its transaction on first use
 * (`transactionOnFirstUse`, src/adapters/pg-pipeline.ts): a handler that never touches the
 * database costs its task one statement (the completion, with the next claim) and no BEGIN, lock
 * or COMMIT. What must still hold: a handler's writes, through `tx.query` or the driver's own
 * `tx.client`, commit with the completion or not at all; a failed handler records its failure;
 * a task fenced meanwhile completes nothing and claims nothing; and a handler that runs until
 * its lease is nearly over takes the row lock then, so no other worker takes the task over while
 * it runs. The statements are seen on the wire (a proxy between the pool and PostgreSQL).
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createClaims, createClaimsWorker, type Claims } from 'idem/claims';
import { createEvents } from 'idem';
import { createManualClock, type ManualClock } from 'idem/testing';
import { countRows, createEffectsSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { startPgProxyTo, type PgProxy } from '../support/faults/pg-proxy.js';
import { waitFor } from '../support/poll.js';

describe('claims on a pipelined pool: BEGIN on the handler’s first use of the transaction', () => {
  let db: TestSchema;
  let proxy: PgProxy;
  let pool: pg.Pool;
  let clock: ManualClock;
  let claims: Claims;
  let queues = 0;
  /** Every BEGIN that went through the proxy (a simple query; bounds may share its message). */
  let begins = 0;

  beforeAll(async () => {
    db = await createEffectsSchema();
    proxy = await startPgProxyTo(databaseUrl());
    pool = new pg.Pool({ connectionString: proxy.url(databaseUrl()), max: 4, pipeline: true });
    clock = createManualClock({ startMs: Date.UTC(2031, 0, 1) });
    claims = createClaims({ sql: fromPg(pool), schema: db.schema, clock, leaseMs: 30_000 });
    void proxy.onStatement(/^\s*BEGIN/i, () => void begins++, { times: Number.MAX_SAFE_INTEGER });
  });
  afterAll(async () => {
    await pool?.end();
    await proxy?.close();
    await db?.close();
  });

  /** `count` fresh tasks of a new queue, and the first of them claimed. */
  async function enqueued(count = 1) {
    const queue = `q${++queues}`;
    for (let i = 0; i < count; i++)
      await claims.enqueue({ tenant: 'acme', queue, key: `k${i}`, payload: { i } });
    const [task] = await claims.claim(queue);
    return { queue, task: task! };
  }
  const effects = (intent: string) =>
    countRows(db.pool, `SELECT count(*)::int AS n FROM "${db.schema}".effects WHERE intent = $1`, [intent]);
  const stateOf = async (task: { id: string }) => (await claims.get({ id: task.id, tenant: 'acme' }))?.state;
  const write = () => `INSERT INTO "${db.schema}".effects (tenant, intent) VALUES ('acme', $1)`;

  it('a handler that touches nothing: completed, the next task claimed, and no BEGIN sent', async () => {
    const { queue, task } = await enqueued(3);
    begins = 0;
    let next: typeof task | undefined = task;
    const done: string[] = [];
    while (next) {
      const ran: typeof task = next;
      const step = await claims.runAndClaimNext(ran, async () => ({ sent: ran.key }), queue);
      expect(step.outcome).toEqual({ state: 'completed', value: { sent: ran.key } });
      done.push(ran.key);
      next = step.next;
    }
    expect(done).toEqual(['k0', 'k1', 'k2']);
    expect(begins).toBe(0);
    expect(await claims.get({ id: task.id, tenant: 'acme' })).toMatchObject({
      state: 'completed',
      result: { sent: 'k0' },
    });
  });

  it("a handler that writes through tx.query or the driver's client: one transaction with the completion", async () => {
    const { task } = await enqueued();
    begins = 0;
    const viaQuery = await claims.run(task, async (tx) => {
      await tx.query(write(), [task.id]);
      return 'query';
    });
    expect(viaQuery.state).toBe('completed');
    const { task: second } = await enqueued();
    const viaClient = await claims.run(second, async (tx) => {
      await (tx.client as pg.PoolClient).query(write(), [second.id]);
      return 'client';
    });
    expect(viaClient.state).toBe('completed');
    expect(begins).toBe(2);
    expect(await effects(task.id)).toBe(1);
    expect(await effects(second.id)).toBe(1);
  });

  it('a failing handler: its writes rolled back and the failure recorded; one that wrote nothing too', async () => {
    const { task } = await enqueued();
    const wrote = await claims.run(task, async (tx) => {
      await tx.query(write(), [task.id]);
      throw Object.assign(new Error('provider down'), { retryable: true });
    });
    expect(wrote.state).toBe('ready');
    expect(await effects(task.id)).toBe(0);
    expect(await stateOf(task)).toBe('ready');
    const { task: other } = await enqueued();
    const untouched = await claims.run(other, async () => {
      throw Object.assign(new Error('provider down'), { retryable: true });
    });
    expect(untouched.state).toBe('ready');
    expect(await stateOf(other)).toBe('ready');
    // The pool goes on: nothing was left open on its connections (the proxy's sessions; other
    // suites share the database).
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
       WHERE state LIKE 'idle in transaction%' AND client_port = ANY($1::int[])`,
      [proxy.backendPorts()],
    );
    expect(rows[0]!.n).toBe(0);
  });

  it('a task taken over while its untouched handler ran: fenced, nothing claimed for it', async () => {
    const { queue, task } = await enqueued(1);
    // A worker whose clock runs ahead takes the task over while this one still sees its lease.
    const ahead = createClaims({
      sql: fromPg(db.pool),
      schema: db.schema,
      clock: createManualClock({ startMs: clock.now() + 30_001 }),
      leaseMs: 30_000,
    });
    const [takeover] = await ahead.claim(queue);
    expect(takeover?.id).toBe(task.id);
    await claims.enqueue({ tenant: 'acme', queue, key: 'k1', payload: {} });
    const { outcome, next } = await claims.runAndClaimNext(task, async () => 'late', queue);
    expect(outcome.state).toBe('fenced');
    expect(next).toBeUndefined();
    // The other task of the queue is still there for whoever claims next.
    const [waiting] = await claims.claim(queue);
    expect(waiting?.key).toBe('k1');
    expect((await ahead.run(takeover!, async () => 'mine')).state).toBe('completed');
  });

  it('a handler still running when its lease is nearly over takes the lock then: no takeover', async () => {
    // 5.3 s of lease by this worker's clock: the lock goes out 0.3 s (real time) into the handler,
    // 5 s (`lockAheadMarginMs`) before the lease ends.
    const short = createClaims({ sql: fromPg(pool), schema: db.schema, clock, leaseMs: 5_300 });
    const queue = `q${++queues}`;
    await short.enqueue({ tenant: 'acme', queue, key: 'slow', payload: {} });
    const [task] = await short.claim(queue);
    let finish!: () => void;
    const released = new Promise<void>((resolve) => (finish = resolve));
    begins = 0;
    const running = short.run(task!, async () => {
      await released;
      return 'sent once';
    });
    await waitFor(() => begins === 1, 'the lock taken before the lease ends');
    // The lease lapses by every clock; another worker's claim skips the locked row.
    clock.advance(10_000);
    const thief = createClaims({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: 5_300 });
    expect(await thief.claim(queue)).toEqual([]);
    finish();
    expect(await running).toEqual({ state: 'completed', value: 'sent once' });
    expect(await stateOf(task!)).toBe('completed');
  });

  it('a claims worker drains its queue with an empty handler and opens no transaction', async () => {
    const queue = `q${++queues}`;
    await claims.enqueueMany(
      Array.from({ length: 40 }, (_, i) => ({ tenant: 'acme', queue, key: `w${i}`, payload: { i } })),
    );
    begins = 0;
    let settled = 0;
    const events = createEvents();
    events.on('task:settled', (s) => {
      if (s.state === 'completed') settled++;
    });
    const worker = createClaimsWorker({
      claims,
      queue,
      concurrency: 4,
      pollIntervalMs: 50,
      events,
      handler: async () => 'ok',
    });
    await worker.start();
    await waitFor(() => settled === 40, 'the 40 tasks completed');
    await worker.stop();
    expect(begins).toBe(0);
    const completed = await countRows(
      db.pool,
      `SELECT count(*)::int AS n FROM "${db.schema}".tasks WHERE queue = $1 AND state = 'completed'`,
      [queue],
    );
    expect(completed).toBe(40);
  });
});
