/**
 * `claims.run` on the drivers that send a statement with COMMIT (node-postgres in pipeline mode,
 * postgres.js): the task's row is locked for the transaction (nothing written), and its completion
 * goes out with COMMIT. What must hold whatever the round trips, as for `run`'s record with COMMIT
 * (test/adapters/record-with-commit.test.ts): the handler's writes and the completion commit
 * together or not at all; a task taken over is not run and writes nothing (and when the lock went
 * out ahead of the handler, nothing it wrote commits); a failure at COMMIT
 * completes nothing and leaves the pool usable.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClaims, type Claims } from 'idem/claims';
import { createManualClock, type ManualClock } from 'idem/testing';
import { adapterFactories, prepareAdapter, type AdapterUnderTest } from '../support/adapters.js';
import { countRows } from '../support/database.js';

const committing = adapterFactories.filter(
  (f) => f.name === 'pg (pipeline mode)' || f.name === 'postgres.js',
);

describe.each(committing)('$name: a task completes with COMMIT', (factory) => {
  const schema = `idem_claims_commit_${randomBytes(4).toString('hex')}`;
  let adapter: AdapterUnderTest;
  let clock: ManualClock;
  let claims: Claims;
  let tasks = 0;

  beforeAll(async () => {
    adapter = await prepareAdapter(factory, schema);
    clock = createManualClock({ startMs: Date.UTC(2031, 0, 1) });
    claims = createClaims({ sql: adapter.sql, schema, clock, leaseMs: 10_000 });
    await adapter.sql.query(
      `CREATE TABLE "${schema}".checked (code text UNIQUE DEFERRABLE INITIALLY DEFERRED)`,
    );
  });
  afterAll(() => adapter?.close());

  /** One fresh task, claimed. */
  async function claimed() {
    const queue = `q${++tasks}`;
    await claims.enqueue({ tenant: 'acme', queue, key: 'k', payload: { n: tasks } });
    const [task] = await claims.claim(queue);
    return task!;
  }
  const effects = (intent: string) =>
    countRows(adapter.sql, `SELECT count(*) AS n FROM "${schema}".effects WHERE intent = $1`, [intent]);
  const state = async (task: { id: string }) => (await claims.get({ id: task.id, tenant: 'acme' }))?.state;

  it("commits the handler's writes with the completion", async () => {
    const task = await claimed();
    const outcome = await claims.run(task, async (tx) => {
      await tx.query(`INSERT INTO "${schema}".effects (tenant, intent) VALUES ('acme', $1)`, [task.id]);
      return { sent: true };
    });
    expect(outcome).toEqual({ state: 'completed', value: { sent: true } });
    expect(await effects(task.id)).toBe(1);
    expect(await claims.get({ id: task.id, tenant: 'acme' })).toMatchObject({
      state: 'completed',
      result: { sent: true },
    });
  });

  it('rolls the writes back with a failing handler, and records the failure', async () => {
    const task = await claimed();
    const outcome = await claims.run(task, async (tx) => {
      await tx.query(`INSERT INTO "${schema}".effects (tenant, intent) VALUES ('acme', $1)`, [task.id]);
      throw Object.assign(new Error('provider down'), { retryable: true });
    });
    expect(outcome.state).toBe('ready');
    expect(await effects(task.id)).toBe(0);
    expect(await state(task)).toBe('ready');
  });

  it('does not run a task taken over by another worker', async () => {
    const task = await claimed();
    clock.advance(10_001); // the lease lapses; another worker takes the task over
    const [takeover] = await claims.claim(task.queue);
    expect(takeover?.fence).toBe(task.fence + 1);
    let ran = false;
    const outcome = await claims.run(task, async () => {
      ran = true;
    });
    expect(outcome.state).toBe('fenced');
    expect(ran).toBe(false);
    expect(await state(task)).toBe('claimed');
    expect((await claims.run(takeover!, async () => 'mine')).state).toBe('completed');
  });

  it('commits nothing of a task fenced while its lock went out ahead of the handler', async () => {
    // A worker whose clock runs ahead takes the task over while this one still sees 10 s of lease:
    // the lock goes out with BEGIN, unanswered, and the handler's write queues behind it.
    const task = await claimed();
    const ahead = createManualClock({ startMs: clock.now() + 10_001 });
    const other = createClaims({ sql: adapter.sql, schema, clock: ahead, leaseMs: 10_000 });
    const [takeover] = await other.claim(task.queue);
    expect(takeover?.fence).toBe(task.fence + 1);
    const outcome = await claims.run(task, async (tx) => {
      await tx.query(`INSERT INTO "${schema}".effects (tenant, intent) VALUES ('acme', $1)`, [task.id]);
      return 'late';
    });
    expect(outcome.state).toBe('fenced');
    expect(await effects(task.id)).toBe(0);
    // An empty handler: the completion (and the next claim) went out behind the failed lock.
    await claims.enqueue({ tenant: 'acme', queue: task.queue, key: 'k2', payload: {} });
    const { outcome: second, next } = await claims.runAndClaimNext(task, async () => 'late', task.queue);
    expect(second.state).toBe('fenced');
    expect(next).toBeUndefined();
    expect(await state(task)).toBe('claimed');
    expect((await other.run(takeover!, async () => 'mine')).state).toBe('completed');
    const [waiting] = await claims.claim(task.queue);
    expect(waiting?.key).toBe('k2');
    expect((await claims.run(waiting!, async () => 'after')).state).toBe('completed');
  });

  it('completes nothing when COMMIT fails, and the pool goes on', async () => {
    const task = await claimed();
    await adapter.sql.query(`INSERT INTO "${schema}".checked VALUES ('taken')`);
    // A deferred constraint is checked at COMMIT, which went out with the completion.
    await expect(
      claims.run(task, async (tx) => {
        await tx.query(`INSERT INTO "${schema}".effects (tenant, intent) VALUES ('acme', $1)`, [task.id]);
        await tx.query(`INSERT INTO "${schema}".checked VALUES ('taken')`);
      }),
    ).rejects.toMatchObject({ code: '23505' });
    expect(await effects(task.id)).toBe(0);
    expect(await state(task)).toBe('claimed');
    const next = await claimed();
    expect((await claims.run(next, async () => 'after')).state).toBe('completed');
  });
});
