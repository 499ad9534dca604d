import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { createKeepAlive, createClaimsWorker, type ClaimedTask } from '../../src/claims/index.js';
import { createClaims, type Claims } from '../../src/claims/claims.js';
import { ManualClock } from '../../src/core/clock.js';
import { createEvents, type IdemErrorEvent, type IdemEventMap } from '../../src/core/event-channel.js';
import { isFenced, isKeyReused } from '../../src/core/errors.js';
import type { Queryable } from '../../src/core/sql.js';
import { createTestSchema, type TestSchema } from '../support/database.js';

describe('claims', () => {
  let db: TestSchema;
  let clock: ManualClock;
  let queueCounter = 0;
  const lease = 10_000;

  beforeAll(async () => {
    db = await createTestSchema({ poolSize: 12 });
    clock = new ManualClock(Date.UTC(2031, 0, 1));
    await db.pool.query(
      `CREATE TABLE "${db.schema}".effects (id serial PRIMARY KEY, task_key text NOT NULL, worker text NOT NULL)`,
    );
  });
  afterAll(() => db.close());

  const newQueue = () => `q${++queueCounter}`;
  const make = (workerId: string, extra: Partial<Parameters<typeof createClaims>[0]> = {}): Claims =>
    createClaims({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: lease, workerId, ...extra });

  async function effect(tx: Queryable, task: ClaimedTask, worker: string): Promise<void> {
    await tx.query(`INSERT INTO "${db.schema}".effects (task_key, worker) VALUES ($1, $2)`, [
      task.downstreamKey,
      worker,
    ]);
  }
  async function effects(key: string): Promise<number> {
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${db.schema}".effects WHERE task_key = $1`,
      [key],
    );
    return rows[0]!.n;
  }

  it('enqueue with the same dedupe key returns the existing task; another payload is refused', async () => {
    const claims = make('w1');
    const queue = newQueue();
    const first = await claims.enqueue({ tenant: 'acme', queue, key: 'order-1', payload: { order: 1 } });
    const again = await claims.enqueue({ tenant: 'acme', queue, key: 'order-1', payload: { order: 1 } });
    expect(first.created).toBe(true);
    expect(again.created).toBe(false);
    expect(again.task.id).toBe(first.task.id);
    // Same key in another tenant is another intent.
    const other = await claims.enqueue({ tenant: 'globex', queue, key: 'order-1', payload: { order: 1 } });
    expect(other.created).toBe(true);
    await expect(
      claims.enqueue({ tenant: 'acme', queue, key: 'order-1', payload: { order: 2 } }),
    ).rejects.toSatisfy(isKeyReused);
    // Enqueued atomically with the caller's writes: a rollback leaves no task.
    await expect(
      fromPg(db.pool).transaction(async (tx) => {
        await claims.enqueueIn(tx, { tenant: 'acme', queue, key: 'order-2', payload: {} });
        throw new Error('business write failed');
      }),
    ).rejects.toThrow('business write failed');
    expect(await claims.get({ tenant: 'acme', queue: queue, key: 'order-2' })).toBeNull();
    // Concurrent enqueues of one key: one task.
    const racing = await Promise.all(
      Array.from({ length: 8 }, () => claims.enqueue({ tenant: 'acme', queue, key: 'order-3', payload: {} })),
    );
    expect(new Set(racing.map((r) => r.task.id)).size).toBe(1);
    expect(racing.filter((r) => r.created)).toHaveLength(1);
  });

  it('claims N tasks with SKIP LOCKED: concurrent workers get disjoint tasks, due ones only', async () => {
    const queue = newQueue();
    const claims = make('w1');
    for (let i = 0; i < 30; i++)
      await claims.enqueue({ tenant: 'acme', queue, key: `t${i}`, payload: { i } });
    await claims.enqueue({ tenant: 'acme', queue, key: 'later', payload: {}, runAt: clock.now() + 60_000 });
    const workers = Array.from({ length: 6 }, (_, i) => make(`w${i}`));
    const batches = await Promise.all(workers.map((w) => w.claim(queue, { limit: 7 })));
    const ids = batches.flat().map((t) => t.id);
    expect(ids).toHaveLength(30);
    expect(new Set(ids).size).toBe(30);
    expect(batches.every((b) => b.length <= 7)).toBe(true);
    expect(batches.flat().every((t) => t.fence === 1 && t.attempts === 1)).toBe(true);
    expect(await claims.claim(queue, { limit: 10 })).toHaveLength(0);
    clock.advance(60_000); // the leases (10 s) lapsed too: all 31 are claimable now
    expect(await claims.claim(queue, { limit: 100 })).toHaveLength(31);
  });

  it("refuses a zombie's completion, heartbeat, failure and guarded writes after a takeover", async () => {
    const queue = newQueue();
    const a = make('worker-a');
    const b = make('worker-b');
    await a.enqueue({ tenant: 'acme', queue, key: 'job', payload: { n: 1 } });
    const [zombie] = await a.claim(queue);
    expect(zombie!.fence).toBe(1);
    // Worker A stalls (a GC pause, a partition) past its lease; B takes the task over.
    expect(await b.claim(queue)).toHaveLength(0);
    clock.advance(lease + 1);
    const [holder] = await b.claim(queue);
    expect(holder!.id).toBe(zombie!.id);
    expect(holder!.fence).toBe(2);
    expect(holder!.downstreamKey).toBe(zombie!.downstreamKey); // the same downstream key for the same intent

    await expect(a.complete(zombie!)).rejects.toSatisfy(isFenced);
    await expect(a.heartbeat(zombie!)).rejects.toSatisfy(isFenced);
    await expect(a.fail(zombie!, new Error('late failure'))).rejects.toSatisfy(isFenced);
    const zombieRun = await a.run(zombie!, async (tx) => effect(tx, zombie!, 'a'));
    expect(zombieRun.state).toBe('fenced');
    await expect(
      fromPg(db.pool).transaction(async (tx) => {
        await effect(tx, zombie!, 'a');
        await a.completeIn(tx, zombie!, { by: 'a' });
      }),
    ).rejects.toSatisfy(isFenced);
    expect((await a.completeMany([zombie!])).refused).toHaveLength(1);

    const outcome = await b.run(holder!, async (tx) => {
      await effect(tx, holder!, 'b');
      return { by: 'b' };
    });
    expect(outcome).toEqual({ state: 'completed', value: { by: 'b' } });
    expect(await effects(holder!.downstreamKey)).toBe(1);
    const stored = await b.get({ id: holder!.id });
    expect(stored?.state).toBe('completed');
    expect(stored?.result).toEqual({ by: 'b' });
    // After completion even the holder's fence is useless: nothing completes twice.
    await expect(b.complete(holder!)).rejects.toSatisfy(isFenced);
  });

  it("runIn completes in the caller's transaction: a rollback leaves the task claimed, a lost lease is refused", async () => {
    const queue = newQueue();
    const a = make('worker-a');
    const b = make('worker-b');
    const sql = fromPg(db.pool);
    await a.enqueue({ tenant: 'acme', queue, key: 'in-tx', payload: {} });
    const [task] = await a.claim(queue);
    await expect(
      sql.transaction(async (tx) => {
        expect(await a.runIn(tx, task!, (tx, t) => effect(tx, t, 'a').then(() => 'done'))).toBe('done');
        throw new Error('the caller rolls back');
      }),
    ).rejects.toThrow('the caller rolls back');
    expect((await a.get({ id: task!.id }))!.state).toBe('claimed');
    expect(await effects(task!.downstreamKey)).toBe(0);
    clock.advance(lease + 1);
    const [taken] = await b.claim(queue);
    await expect(
      sql.transaction((tx) => a.runIn(tx, task!, (tx, t) => effect(tx, t, 'a'))),
    ).rejects.toSatisfy(isFenced);
    await sql.transaction((tx) => b.runIn(tx, taken!, (tx, t) => effect(tx, t, 'b')));
    expect((await b.get({ id: task!.id }))!.state).toBe('completed');
    expect(await effects(task!.downstreamKey)).toBe(1);
  });

  it('heartbeats keep the lease; keepAlive aborts its signal when the lease is lost', async () => {
    const queue = newQueue();
    const a = make('worker-a');
    const b = make('worker-b');
    await a.enqueue({ tenant: 'acme', queue, key: 'long', payload: {} });
    const [task] = await a.claim(queue);
    for (let i = 0; i < 3; i++) {
      clock.advance(6000);
      await a.heartbeat(task!);
      expect(await b.claim(queue)).toHaveLength(0);
    }
    const idle = clock.waiting;
    const alive = createKeepAlive({ claims: a, task: task!, intervalMs: 3000 });
    await alive.start();
    for (let i = 0; i < 3; i++) {
      // Moved only once the heartbeat sleeps again: a beat whose answer came back before its loop
      // armed the next sleep would otherwise sleep from the later time, and never wake.
      await settle(async () => clock.waiting > idle);
      clock.advance(3000);
      await settle(() => a.get({ id: task!.id }).then((t) => t!.visibleAt === clock.now() + lease));
    }
    expect(await b.claim(queue)).toHaveLength(0);
    await alive.stop();
    clock.advance(lease + 1);
    const [taken] = await b.claim(queue);
    expect(taken!.fence).toBe(task!.fence + 1);
    const lost = createKeepAlive({ claims: a, task: task!, intervalMs: 1000 });
    await lost.start();
    await settle(async () => clock.waiting > idle);
    clock.advance(1000);
    await settle(async () => lost.signal.aborted);
    expect(isFenced(lost.signal.reason)).toBe(true);
    await lost.stop();
  });

  it('retries a retryable failure with backoff, then dead-letters; an operator can redrive', async () => {
    const queue = newQueue();
    const claims = make('w', { maxAttempts: 3, backoff: { baseMs: 1000, maxMs: 8000 } });
    await claims.enqueue({ tenant: 'acme', queue, key: 'flaky', payload: {} });
    const transient = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    const delays: number[] = [];
    for (let attempt = 1; attempt <= 3; attempt++) {
      const [task] = await claims.claim(queue);
      expect(task!.attempts).toBe(attempt);
      const failed = await claims.fail(task!, transient);
      if (attempt < 3) {
        expect(failed.state).toBe('ready');
        const delay = failed.retryAt! - clock.now();
        delays.push(delay);
        // Equal jitter: within [d/2, d] for d = 1000 · 2^(attempt−1).
        expect(delay).toBeGreaterThanOrEqual(500 * 2 ** (attempt - 1));
        expect(delay).toBeLessThanOrEqual(1000 * 2 ** (attempt - 1));
        expect(await claims.claim(queue)).toHaveLength(0); // not before its backoff
        clock.advance(delay);
      } else {
        expect(failed).toEqual({ state: 'dead', retryAt: null });
      }
    }
    const dead = await claims.listDead({ queue });
    expect(dead.map((t) => t.key)).toEqual(['flaky']);
    expect(dead[0]!.lastError).toContain('ECONNREFUSED');
    clock.advance(60_000);
    expect(await claims.claim(queue)).toHaveLength(0);
    const redriven = await claims.redrive(dead[0]!.id);
    expect(redriven?.state).toBe('ready');
    const [again] = await claims.claim(queue);
    expect(again!.attempts).toBe(1);
    expect(again!.fence).toBe(4); // fences only ever rise
  });

  it('dead-letters at once on a non-retryable failure, and after repeated lapsed leases', async () => {
    const queue = newQueue();
    const claims = make('w', { maxAttempts: 2 });
    await claims.enqueue({ tenant: 'acme', queue, key: 'bad-input', payload: {} });
    await claims.enqueue({ tenant: 'acme', queue, key: 'poison', payload: {}, runAt: clock.now() + 1 });
    const [bad] = await claims.claim(queue);
    expect((await claims.fail(bad!, new TypeError('payload has no order id'))).state).toBe('dead');
    // A per-attempt timeout (AbortSignal.timeout) is retryable: the task comes back after a backoff.
    const timeout = new DOMException('The operation was aborted due to timeout', 'TimeoutError');
    await claims.enqueue({ tenant: 'acme', queue: `${queue}-t`, key: 'slow', payload: {} });
    const [slow] = await claims.claim(`${queue}-t`);
    expect((await claims.fail(slow!, timeout)).state).toBe('ready');
    // A task that kills its worker every time: each lapsed lease counts as an attempt.
    clock.advance(1);
    expect(await claims.claim(queue)).toHaveLength(1);
    clock.advance(lease + 1);
    expect(await claims.claim(queue)).toHaveLength(1);
    clock.advance(lease + 1);
    expect(await claims.claim(queue)).toHaveLength(0);
    const dead = await claims.listDead({ queue });
    expect(dead.map((t) => [t.key, t.lastError?.split(':')[0]])).toEqual([
      ['bad-input', 'TypeError'],
      ['poison', 'lease expired'],
    ]);
  });

  it('run commits the handler writes with the completion; a failing handler leaves nothing', async () => {
    const queue = newQueue();
    const claims = make('w', { maxAttempts: 2 });
    await claims.enqueue({ tenant: 'acme', queue, key: 'r1', payload: {} });
    const [task] = await claims.claim(queue);
    const failed = await claims.run(task!, async (tx) => {
      await effect(tx, task!, 'w');
      throw Object.assign(new Error('deadlock'), { code: '40P01' });
    });
    expect(failed.state).toBe('ready');
    expect(await effects(task!.downstreamKey)).toBe(0);
    clock.advance(60_000);
    const [retry] = await claims.claim(queue);
    const done = await claims.run(retry!, async (tx) => {
      await effect(tx, retry!, 'w');
      return 'ok';
    });
    expect(done).toEqual({ state: 'completed', value: 'ok' });
    expect(await effects(task!.downstreamKey)).toBe(1);
  });

  it('gives exactly one effect per task with four concurrent workers that abandon tasks at random', async () => {
    const queue = newQueue();
    const workers = Array.from({ length: 4 }, (_, i) => make(`w${i}`, { maxAttempts: 50 }));
    const total = 60;
    for (let i = 0; i < total; i++)
      await workers[0]!.enqueue({ tenant: 'acme', queue, key: `c${i}`, payload: { i } });
    let abandoned = 0;
    for (let round = 0; round < 200; round++) {
      const batches = await Promise.all(workers.map((w) => w.claim(queue, { limit: 5 })));
      if (batches.every((b) => b.length === 0)) {
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM "${db.schema}".tasks WHERE queue = $1 AND state <> 'completed'`,
          [queue],
        );
        if (rows[0]!.n === 0) break;
        clock.advance(lease + 1); // let abandoned leases lapse
        continue;
      }
      await Promise.all(
        batches.flatMap((batch, w) =>
          batch.map(async (task) => {
            if (Math.random() < 0.3) {
              abandoned++; // the worker "dies" holding the task
              return;
            }
            await workers[w]!.run(task, (tx) => effect(tx, task, `w${w}`));
          }),
        ),
      );
    }
    expect(abandoned).toBeGreaterThan(0);
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${db.schema}".tasks WHERE queue = $1 AND state = 'completed'`,
      [queue],
    );
    expect(rows[0]!.n).toBe(total);
    for (let i = 0; i < total; i++) {
      const task = (await workers[0]!.get({ tenant: 'acme', queue: queue, key: `c${i}` }))!;
      expect(await effects(task.downstreamKey)).toBe(1);
    }
  });

  it('enqueueMany dedupes like enqueue; completeAndClaim completes fenced and claims in one statement', async () => {
    const queue = newQueue();
    const a = make('worker-a');
    const b = make('worker-b');
    const specs = ['m1', 'm2', 'm1', 'm3'].map((key) => ({ tenant: 'acme', queue, key, payload: { key } }));
    const first = await a.enqueueMany(specs);
    expect(first.map((r) => [r.task.key, r.created])).toEqual([
      ['m1', true],
      ['m2', true],
      ['m1', false],
      ['m3', true],
    ]);
    expect(first[2]!.task.id).toBe(first[0]!.task.id);
    const again = await a.enqueueMany(specs.slice(0, 2));
    expect(again.map((r) => [r.task.id, r.created])).toEqual([
      [first[0]!.task.id, false],
      [first[1]!.task.id, false],
    ]);
    await expect(
      a.enqueueMany([{ tenant: 'acme', queue, key: 'm2', payload: { other: 1 } }]),
    ).rejects.toSatisfy(isKeyReused);

    const held = await a.claim(queue, { limit: 2 });
    expect(held.map((t) => t.key)).toEqual(['m1', 'm2']);
    await a.enqueue({
      tenant: 'acme',
      queue,
      key: 'm4',
      payload: { key: 'm4' },
      runAt: clock.now() + lease + 1,
    });
    // A stalls past its lease; worker B takes m1 over (m3, due earlier, stays for later).
    clock.advance(lease + 1);
    const byB = await b.claim(queue, { limit: 2 });
    expect(byB.map((t) => t.key)).toEqual(['m1', 'm3']); // returned in id order
    const [taken, t3] = byB;
    // A's batch completion must refuse m1 (fenced) and accept m2; the same statement claims m4.
    const next = await a.completeAndClaim(held, queue, { limit: 5, results: ['r1', 'r2'] });
    expect(next.completed.map((t) => t.key)).toEqual(['m2']);
    expect(next.refused.map((t) => t.key)).toEqual(['m1']);
    expect(next.claimed.map((t) => [t.key, t.fence, t.attempts])).toEqual([['m4', 1, 1]]);
    expect(next.claimed[0]!.leaseUntil).toBe(clock.now() + lease);
    expect(next.claimed[0]!.payload).toEqual({ key: 'm4' });
    expect((await a.get({ id: held[1]!.id }))?.result).toBe('r2');
    const last = await a.completeAndClaim(next.claimed, queue, { limit: 5 });
    expect([last.completed.length, last.claimed.length]).toEqual([1, 0]);
    expect((await b.completeMany([t3!, taken!])).completed).toHaveLength(2);
    const states = await Promise.all(first.map((r) => a.get({ id: r.task.id })));
    expect(states.map((t) => t?.state)).toEqual(['completed', 'completed', 'completed', 'completed']);
  });

  it('a worker reports every settled task, and the errors it and a keep-alive survive, on the channel', async () => {
    const queue = newQueue();
    const events = createEvents();
    const settled: IdemEventMap['task:settled'][] = [];
    const errors: IdemErrorEvent[] = [];
    events.on('task:settled', (e) => settled.push(e));
    events.on('error', (e) => errors.push(e));
    // The worker reports where its claims do, unless given a channel of its own.
    const claims = make('w', { maxAttempts: 1, events });
    await claims.enqueue({ tenant: 'acme', queue, key: 'ok', payload: { secret: 'not reported' } });
    await claims.enqueue({ tenant: 'acme', queue, key: 'bad', payload: {} });
    const boom = new Error('boom');
    const worker = createClaimsWorker({
      claims,
      queue,
      handler: async (_tx, task) => {
        if (task.key === 'bad') throw boom;
      },
    });
    await worker.drain();
    const byKey = settled.sort((x, y) => x.task.key.localeCompare(y.task.key));
    expect(byKey).toEqual([
      {
        task: { id: expect.any(String) as unknown, tenant: 'acme', queue, key: 'bad', attempts: 1 },
        state: 'dead',
        error: boom,
      },
      {
        task: { id: expect.any(String) as unknown, tenant: 'acme', queue, key: 'ok', attempts: 1 },
        state: 'completed',
      },
    ]);
    expect(JSON.stringify(settled)).not.toContain('not reported');

    // A database failure of the loop: an error event, and the loop goes on.
    const broken = createClaims({ sql: fromPg(db.pool), schema: 'idem_no_such_schema', clock, events });
    const own = createEvents();
    const ownErrors: IdemErrorEvent[] = [];
    own.on('error', (e) => ownErrors.push(e));
    const failing = createClaimsWorker({
      claims: broken,
      queue,
      handler: async () => undefined,
      events: own,
    });
    await failing.start();
    await settle(async () => ownErrors.length > 0);
    await failing.stop();
    expect(ownErrors[0]).toMatchObject({ source: 'claims-worker', where: 'batch' });

    // A heartbeat that fails for another reason than a lost lease: reported, and retried.
    await claims.enqueue({ tenant: 'acme', queue, key: 'long', payload: {} });
    const [task] = await claims.claim(queue);
    const alive = createKeepAlive({ claims: broken, task: task!, intervalMs: 1000 });
    await alive.start();
    clock.advance(1000);
    await settle(async () => errors.length > 0);
    await alive.stop();
    expect(errors[0]).toMatchObject({ source: 'keep-alive', where: 'heartbeat' });
    expect(alive.signal.aborted).toBe(false);
  });

  it('a worker polls, runs and stops; sweep deletes finished tasks past retention', async () => {
    const queue = newQueue();
    const claims = make('w', { retentionMs: 1000 });
    for (let i = 0; i < 5; i++) await claims.enqueue({ tenant: 'acme', queue, key: `k${i}`, payload: { i } });
    const seen: string[] = [];
    const worker = createClaimsWorker({
      claims,
      queue,
      handler: async (tx, task: ClaimedTask<{ i: number }>) => {
        await effect(tx, task, 'loop');
        seen.push(task.key);
      },
      batchSize: 2,
      pollIntervalMs: 100,
    });
    await worker.start();
    await settle(async () => seen.length === 5);
    await worker.stop();
    expect(seen.sort()).toEqual(['k0', 'k1', 'k2', 'k3', 'k4']);
    clock.advance(1000);
    expect((await claims.sweep()).deleted).toBeGreaterThanOrEqual(5);
    expect(await claims.get({ tenant: 'acme', queue: queue, key: 'k0' })).toBeNull();
    expect((await claims.enqueue({ tenant: 'acme', queue, key: 'k0', payload: { i: 0 } })).created).toBe(
      true,
    );
  });
});

/** Polls a condition that background work will make true (bounded: 5 s). */
async function settle(condition: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error('condition not reached');
}
