/**
 * The claims worker with `concurrency` (slots and a local queue), on a real PostgreSQL: a slow
 * task holds back only its own slot; slots that are free together share one claim; no more tasks
 * are claimed than slots are free (none waits in a buffer with its lease running); every task runs
 * once; a failed claim is reported once and the worker goes on. No wall-clock bound: what is
 * asserted is what ran, what was claimed, and when, in order.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClaims, createClaimsWorker, type ClaimedTask, type Claims } from 'idem/claims';
import { createEvents, type IdemErrorEvent, type IdemEvents, type Transaction } from 'idem';
import { fromPg } from 'idem/pg';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { waitFor } from '../support/poll.js';

describe('a claims worker with concurrency', () => {
  let db: TestSchema;
  let queues = 0;
  const newQueue = () => `slots${++queues}`;

  beforeAll(async () => {
    db = await createTestSchema({ poolSize: 12 });
  });
  afterAll(() => db.close());

  /** Claims on the test schema whose `claim` calls are recorded (the limit each asked for). */
  function spiedClaims(schema = db.schema): { claims: Claims; limits: number[] } {
    const claims = createClaims({ sql: fromPg(db.pool), schema, leaseMs: 60_000 });
    const limits: number[] = [];
    const claim = claims.claim.bind(claims);
    claims.claim = (queue, options) => {
      limits.push(options?.limit ?? 1);
      return claim(queue, options);
    };
    return { claims, limits };
  }

  /** A worker of `concurrency` slots on `queue`, polling every 20 ms. */
  const slotsWorker = (
    claims: Claims,
    queue: string,
    concurrency: number,
    handler: (tx: Transaction, task: ClaimedTask) => Promise<unknown>,
    events?: IdemEvents,
  ) =>
    createClaimsWorker({
      claims,
      queue,
      concurrency,
      pollIntervalMs: 20,
      handler,
      ...(events ? { events } : {}),
    });

  const stateCount = async (queue: string, state: string) =>
    (
      await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${db.schema}".tasks WHERE queue = $1 AND state = $2`,
        [queue, state],
      )
    ).rows[0]!.n;

  it('runs the other tasks while a slow one holds its slot', async () => {
    const queue = newQueue();
    const { claims } = spiedClaims();
    await claims.enqueue({ tenant: 'acme', queue, key: 'slow', payload: {} });
    for (let i = 0; i < 12; i++)
      await claims.enqueue({ tenant: 'acme', queue, key: `quick-${i}`, payload: {} });
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const done: string[] = [];
    let slowStarted = false;
    const worker = slotsWorker(claims, queue, 3, async (_tx, task) => {
      if (task.key === 'slow') {
        slowStarted = true;
        await released;
      }
      done.push(task.key);
    });
    await worker.start();
    try {
      // Every quick task completes (committed: the handler's push comes before its commit) while
      // the slow one is still running in its slot.
      await waitFor(async () => (await stateCount(queue, 'completed')) === 12, 'the quick tasks');
      expect(slowStarted).toBe(true);
      expect(done).not.toContain('slow');
      expect(await stateCount(queue, 'claimed')).toBe(1);
    } finally {
      release();
      await waitFor(() => done.length === 13, 'the slow task');
      await worker.stop();
    }
    expect(done.filter((key) => key === 'slow')).toHaveLength(1);
  });

  it('claims for the free slots in one statement, never more tasks than slots, each task once', async () => {
    const queue = newQueue();
    const { claims, limits } = spiedClaims();
    const count = 40;
    for (let i = 0; i < count; i++)
      await claims.enqueue({ tenant: 'acme', queue, key: `t${i}`, payload: {} });
    const ran = new Map<string, number>();
    let running = 0;
    let mostRunning = 0;
    let mostClaimed = 0;
    const worker = slotsWorker(claims, queue, 4, async (tx, task) => {
      mostRunning = Math.max(mostRunning, ++running);
      // Inside a task: what the database holds claimed now is at most the slots.
      const claimed = await tx.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${db.schema}".tasks WHERE queue = $1 AND state = 'claimed'`,
        [queue],
      );
      mostClaimed = Math.max(mostClaimed, claimed.rows[0]!.n);
      ran.set(task.key, (ran.get(task.key) ?? 0) + 1);
      running--;
    });
    await worker.start();
    await waitFor(() => ran.size === count, 'every task');
    await worker.stop();
    expect([...ran.values()].every((times) => times === 1)).toBe(true);
    expect(mostRunning).toBeLessThanOrEqual(4);
    expect(mostClaimed).toBeLessThanOrEqual(4);
    expect(Math.max(...limits)).toBeLessThanOrEqual(4);
    // The four slots start free together: the first claim is one statement for all of them; then
    // each completion claims its slot's next task, so there are far fewer claims than tasks.
    expect(limits[0]).toBe(4);
    expect(limits.length).toBeLessThan(count);
    const { rows } = await db.pool.query<{ state: string; n: number }>(
      `SELECT state, count(*)::int AS n FROM "${db.schema}".tasks WHERE queue = $1 GROUP BY state`,
      [queue],
    );
    expect(rows).toEqual([{ state: 'completed', n: count }]);
  });

  it('puts back, on stop, the tasks its completions claimed for slots that did not run them', async () => {
    const queue = newQueue();
    const { claims } = spiedClaims();
    for (let i = 0; i < 30; i++) await claims.enqueue({ tenant: 'acme', queue, key: `t${i}`, payload: {} });
    let ran = 0;
    const worker = slotsWorker(claims, queue, 3, async () => {
      ran++;
    });
    await worker.start();
    await waitFor(() => ran >= 6, 'a few tasks');
    await worker.stop();
    const { rows } = await db.pool.query<{ state: string; n: number }>(
      `SELECT state, count(*)::int AS n FROM "${db.schema}".tasks WHERE queue = $1 GROUP BY state ORDER BY state`,
      [queue],
    );
    // Completed or ready again: nothing left claimed by a stopped worker.
    expect(rows.map((r) => r.state)).not.toContain('claimed');
    expect(rows.reduce((sum, r) => sum + r.n, 0)).toBe(30);
    expect(rows.find((r) => r.state === 'completed')?.n).toBe(ran);
  });

  it('reports a failed claim once, and the slots go on polling', async () => {
    const events = createEvents();
    const errors: IdemErrorEvent[] = [];
    events.on('error', (e) => errors.push(e));
    const { claims, limits } = spiedClaims('idem_no_such_schema');
    const worker = slotsWorker(claims, newQueue(), 3, async () => undefined, events);
    await worker.start();
    await waitFor(() => limits.length >= 3, 'three claims');
    await worker.stop();
    // One error per failed claim, not one per slot that waited on it.
    expect(errors.length).toBeLessThanOrEqual(limits.length);
    expect(errors[0]).toMatchObject({ source: 'claims-worker', where: 'batch' });
  });

  it('refuses a concurrency that is not a positive integer', () => {
    const { claims } = spiedClaims();
    for (const concurrency of [0, -1, 1.5, Number.NaN]) {
      expect(() =>
        createClaimsWorker({ claims, queue: 'q', concurrency, handler: async () => undefined }),
      ).toThrow(expect.objectContaining({ code: 'IDEM_INVALID_ARGUMENT' }));
    }
  });
});
