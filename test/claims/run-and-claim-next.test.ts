/**
 * `claims.runAndClaimNext`, the claims worker's slot path, on every driver that runs it (a plain
 * pool, a pool in pipeline mode, postgres.js): one statement completes the task with its value
 * and claims the queue's next task, of any tenant and never of another queue. And the structure
 * that keeps it cheap: the statement's prepared plan is reused, not planned again per task.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClaims, type Claims } from 'idem/claims';
import { createManualClock } from 'idem/testing';
import { fromPg } from 'idem/pg';
import { adapterFactories, prepareAdapter, type AdapterUnderTest } from '../support/adapters.js';
import { createTestSchema, type TestSchema } from '../support/database.js';

const drivers = adapterFactories.filter((f) => ['pg', 'pg (pipeline mode)', 'postgres.js'].includes(f.name));

describe.each(drivers)('$name: runAndClaimNext', (factory) => {
  const schema = `idem_claims_next_${randomBytes(4).toString('hex')}`;
  let adapter: AdapterUnderTest;
  let claims: Claims;

  beforeAll(async () => {
    adapter = await prepareAdapter(factory, schema);
    claims = createClaims({ sql: adapter.sql, schema, leaseMs: 60_000 });
  });
  afterAll(() => adapter?.close());

  it("stores the handler's value and claims the queue's next task, of any tenant", async () => {
    await claims.enqueue({ tenant: 'acme', queue: 'receipts', key: 'order-1', payload: { n: 1 } });
    await claims.enqueue({ tenant: 'globex', queue: 'receipts', key: 'order-2', payload: { n: 2 } });
    await claims.enqueue({ tenant: 'acme', queue: 'refunds', key: 'order-1', payload: { n: 3 } });
    const [first] = await claims.claim('receipts');
    expect(first).toMatchObject({ tenant: 'acme', key: 'order-1' });

    const one = await claims.runAndClaimNext(first!, async () => ({ sent: 1 }), 'receipts');
    expect(one.outcome).toEqual({ state: 'completed', value: { sent: 1 } });
    expect(one.next).toMatchObject({ tenant: 'globex', key: 'order-2', state: 'claimed', attempts: 1 });
    expect(await claims.get({ id: first!.id, tenant: 'acme' })).toMatchObject({
      state: 'completed',
      result: { sent: 1 },
    });

    // The last task of the queue: nothing more is claimed, and the other queue's task is left.
    const two = await claims.runAndClaimNext(one.next!, async () => undefined, 'receipts');
    expect(two.outcome.state).toBe('completed');
    expect(two.next).toBeUndefined();
    expect(await claims.get({ id: one.next!.id, tenant: 'globex' })).toMatchObject({
      state: 'completed',
      result: null,
    });
    const [refund] = await claims.claim('refunds');
    expect(refund).toMatchObject({ tenant: 'acme', key: 'order-1', attempts: 1 });
  });

  it('completeAndClaim of one task: completes it and claims one; a task taken over is refused', async () => {
    const clock = createManualClock({ startMs: Date.UTC(2031, 0, 1) });
    const timed = createClaims({ sql: adapter.sql, schema, clock, leaseMs: 10_000 });
    for (const key of ['a', 'b']) await timed.enqueue({ tenant: 'acme', queue: 'one', key, payload: {} });
    const [a] = await timed.claim('one');
    const first = await timed.completeAndClaim([a!], 'one', { results: ['done-a'] });
    expect(first.completed.map((t) => t.key)).toEqual(['a']);
    expect(first.refused).toEqual([]);
    expect(first.claimed.map((t) => t.key)).toEqual(['b']);
    expect((await timed.get({ id: a!.id, tenant: 'acme' }))?.result).toBe('done-a');

    clock.advance(10_001); // b's lease lapses and another worker takes it over
    const [takeover] = await timed.claim('one');
    expect(takeover).toMatchObject({ key: 'b', fence: first.claimed[0]!.fence + 1 });
    await timed.enqueue({ tenant: 'acme', queue: 'one', key: 'c', payload: {} });
    const late = await timed.completeAndClaim(first.claimed, 'one');
    expect(late.completed).toEqual([]);
    expect(late.refused.map((t) => t.key)).toEqual(['b']);
    expect(late.claimed.map((t) => t.key)).toEqual(['c']);
    expect((await timed.get({ id: takeover!.id, tenant: 'acme' }))?.state).toBe('claimed');
  });
});

describe('runAndClaimNext on one connection', () => {
  let db: TestSchema;
  let claims: Claims;

  beforeAll(async () => {
    // One connection: the prepared statement and its plan counts are that connection's.
    db = await createTestSchema({ poolSize: 1 });
    claims = createClaims({ sql: fromPg(db.pool), schema: db.schema, leaseMs: 60_000 });
  });
  afterAll(() => db?.close());

  it('reuses its prepared plan instead of planning the completion again for every task', async () => {
    const count = 12;
    await claims.enqueueMany(
      Array.from({ length: count }, (_, i) => ({ tenant: 'acme', queue: 'q', key: `k${i}`, payload: {} })),
    );
    await db.pool.query(`ANALYZE "${db.schema}".tasks`);
    let [task] = await claims.claim('q');
    let ran = 0;
    while (task) {
      ran++;
      ({ next: task } = await claims.runAndClaimNext(task, async () => undefined, 'q'));
    }
    expect(ran).toBe(count);
    // PostgreSQL plans a prepared statement for its first five executions, then keeps the generic
    // plan unless it is costed above theirs (the batch form's always was: a plan per task).
    const { rows } = await db.pool.query<{ generic: number; custom: number }>(
      `SELECT generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements
       WHERE name LIKE 'idem_task_completeOneThenClaimOne%'`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.custom).toBeLessThanOrEqual(5);
    expect(rows[0]!.generic).toBe(count - rows[0]!.custom);
  });
});
