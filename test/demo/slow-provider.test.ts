/**
 * The demo with a slow card provider: every charge takes 3 s, the demo's pool has 10 connections,
 * and 200 payments arrive at once. The charge is a call between short transactions, so the pool is
 * never held while the provider thinks: every payment succeeds, each is charged once, no session
 * sits idle in transaction across a charge, and the reads keep answering meanwhile. Real HTTP, real PostgreSQL,
 * the demo's own provider.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomSchema, type DemoHandle } from '../../demo/server.js';
import { databaseUrl } from '../support/database.js';
import { dropDemoSchemas, startTestDemo } from '../support/demo.js';
import { repeatEvery } from '../support/poll.js';

describe('payments demo with a provider that answers after 3 s, on a pool of 10', () => {
  let demo: DemoHandle;
  const schema = randomSchema();
  const auth = { authorization: 'Bearer sk_test_slowprovider' };
  const applicationName = `idem-demo-slow-${randomBytes(4).toString('hex')}`;
  const providerMs = 3000;

  beforeAll(async () => {
    const url = new URL(databaseUrl());
    url.searchParams.set('application_name', applicationName);
    // 3 s, not 1: under a loaded CI machine the 200 payments took 1.9–5.5 s to reach the provider,
    // so with 1 s the first ones came back before the last went out and no run had a window.
    demo = await startTestDemo(schema, {
      databaseUrl: url.href,
      poolSize: 10,
      providerLatencyMs: providerMs,
    });
  });
  afterAll(async () => {
    await demo?.close();
    await dropDemoSchemas(schema);
  });

  const pay = (key: string, customer: string) =>
    fetch(`${demo.url}/v1/payments`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ amount: 700, currency: 'eur', customer }),
    });

  it('200 concurrent payments all succeed, each charged once; the pool of 10 is never held across a charge, and reads answer while the charges are out', async () => {
    // Warm the process (code paths, prepared statements, connections) as a running service is.
    const warmUp = await Promise.all(
      Array.from({ length: 20 }, (_, i) => pay(`warm-${randomUUID()}`, `warm_${i}`)),
    );
    expect(warmUp.every((r) => r.status === 201)).toBe(true);
    const observer = new pg.Client({ connectionString: databaseUrl() });
    await observer.connect();
    // Structure, not time (a busy machine makes any bound a coin toss; the latency figures are the
    // bench's): held across the 3 s charge, the pool's 10 connections would let at most 10 calls
    // be out at the provider at once, a read would wait for a connection until a charge ended,
    // and a session would sit idle in transaction holding an idempotency record.
    let mostCallsOut = 0;
    let mostIdleInTransaction = 0;
    let answered = 0;
    const readsWhileOut: number[] = [];
    const run = randomUUID().slice(0, 8);
    const customers = Array.from({ length: 200 }, (_, i) => `slow_${run}_${i}`);
    const callsBefore = demo.provider!.callCount();
    const callsOut = () => demo.provider!.callCount() - callsBefore - answered;
    const watchProvider = setInterval(() => (mostCallsOut = Math.max(mostCallsOut, callsOut())), 5);
    const reader = repeatEvery(25, async () => {
      const outBefore = callsOut();
      const response = await fetch(`${demo.url}/v1/payments`, { headers: auth });
      await response.arrayBuffer();
      // A read that began and ended with more calls out than the pool has connections.
      if (outBefore > 10 && callsOut() > 10) readsWhileOut.push(response.status);
    });
    const sessions = repeatEvery(25, async () => {
      const { rows } = await observer.query<{ n: number }>(
        // A payment's transaction writes its idempotency record (`requests`) first. Its local
        // steps are short transactions of a few statements, so a sample can catch one between
        // two of them; held across a 3 s charge, one would sit idle far longer. (The outbox
        // dispatcher holds its batch transaction while it publishes, on purpose: see
        // src/outbox/dispatcher.ts. It touches no idempotency record.)
        `SELECT count(DISTINCT a.pid)::int AS n FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
          WHERE a.application_name = $1 AND a.state = 'idle in transaction'
            AND now() - a.state_change > interval '800 ms'
            AND l.relation = to_regclass($2)`,
        [applicationName, `"${schema}".requests`],
      );
      mostIdleInTransaction = Math.max(mostIdleInTransaction, rows[0]!.n);
    });
    let answers: Response[];
    try {
      answers = await Promise.all(
        customers.map(async (customer) => {
          const answer = await pay(`pay-${customer}`, customer);
          answered++;
          return answer;
        }),
      );
    } finally {
      clearInterval(watchProvider);
      await reader.stop();
      await sessions.stop();
      await observer.end();
    }

    expect(answers.map((a) => a.status).filter((s) => s !== 201)).toEqual([]);
    const bodies = (await Promise.all(answers.map((a) => a.json()))) as { charge_id: string }[];
    expect(new Set(bodies.map((b) => b.charge_id)).size).toBe(200);
    // Each charged once: one provider call per payment, one charge per customer.
    expect(demo.provider!.callCount() - callsBefore).toBe(200);
    const charges = [...demo.provider!.charges.values()].filter((c) => c.customer.startsWith(`slow_${run}_`));
    expect(charges).toHaveLength(200);
    expect(new Set(charges.map((c) => c.customer)).size).toBe(200);
    expect(mostIdleInTransaction).toBe(0);
    // More calls out at once than the pool has connections: none held one across its charge.
    expect(mostCallsOut).toBeGreaterThan(10);
    // And the pool kept serving reads meanwhile.
    expect(readsWhileOut.length).toBeGreaterThanOrEqual(1);
    expect(readsWhileOut.every((status) => status === 200)).toBe(true);
  });
});
