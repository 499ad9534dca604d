/**
 * The receiver answers quickly while workers are busy with a backlog: answering never waits for
 * processing. Real workers, real HTTP (Fastify) on 127.0.0.1, one shared pool, the system clock.
 */
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import {
  createWebhookProcessor,
  createWebhookReceiver,
  recordHeaders,
  createStandardWebhooksVerifier,
  type WebhookReceiver,
} from '../../src/webhooks/index.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { count, post, signStandard, standardSecret, startServer, type TestServer } from './support.js';

const handlerMs = 250;
const backlog = 64;
const concurrency = 4;
let db: TestSchema;
let receiver: WebhookReceiver;
let server: TestServer;

beforeAll(async () => {
  db = await createTestSchema({ poolSize: 10 });
  receiver = createWebhookReceiver({
    sql: fromPg(db.pool),
    schema: db.schema,
    sources: { billing: createStandardWebhooksVerifier({ secrets: [standardSecret] }) },
  });
  server = await startServer('fastify', receiver);
});

afterAll(async () => {
  await server?.close();
  await db?.close();
});

it('answers in milliseconds while a backlog of slow handlers is worked through', async () => {
  const body = '{"type":"slow"}';
  for (let i = 0; i < backlog; i++) {
    const signed = signStandard({ id: `backlog-${i}`, body, timestampMs: Date.now() });
    await receiver.receive('billing', { headers: recordHeaders(signed.headers), body: signed.body });
  }
  const idle = await answerLatencies('idle', 30);
  const processor = createWebhookProcessor({
    sql: fromPg(db.pool),
    schema: db.schema,
    concurrency,
    pollIntervalMs: 20,
    handlers: {
      billing: {
        // Each receipt holds a connection and a transaction for handlerMs, like real business work.
        slow: async (tx) => {
          await tx.query(`SELECT pg_sleep($1)`, [handlerMs / 1000]);
        },
      },
    },
  });
  await processor.start();
  try {
    // Workers are busy from here on: backlog × handlerMs / concurrency = 4 s of work. Wait for the
    // first receipt to be applied, so the answers below are measured while work is really going on
    // (on a fast machine 60 answers can otherwise all come before the first handler finishes).
    const deadline = Date.now() + 10_000;
    while ((await count(db.pool, db.schema, 'webhook_receipts', `state = 'applied'`)) === 0) {
      if (Date.now() > deadline) throw new Error('the processor applied nothing within 10 s');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const latencies = await answerLatencies('live', 60);
    const stillQueued = await count(
      db.pool,
      db.schema,
      'webhook_receipts',
      `state IN ('pending', 'processing')`,
    );
    const processed = await count(db.pool, db.schema, 'webhook_receipts', `state = 'applied'`);
    const p50 = percentile(latencies, 0.5);
    const p90 = percentile(latencies, 0.9);
    console.log(
      `[answer latency] idle p50 ${percentile(idle, 0.5).toFixed(1)} ms; under backlog p50 ${p50.toFixed(1)} ms, ` +
        `p90 ${p90.toFixed(1)} ms, max ${percentile(latencies, 1).toFixed(1)} ms; ` +
        `processed meanwhile ${processed}, still queued ${stillQueued}`,
    );
    // The answers came while the workers were busy: some work was done, much was still queued.
    expect(processed).toBeGreaterThan(0);
    expect(stillQueued).toBeGreaterThan(backlog / 4);
    // Answers never waited for processing: answering 60 deliveries took far less than the queued work
    // (backlog × handlerMs / concurrency = 4 s). And they were about as fast as with idle workers;
    // the bound is relative to the idle figure because the test machine is shared (figures printed above).
    expect(latencies.reduce((a, b) => a + b, 0)).toBeLessThan((stillQueued * handlerMs) / concurrency);
    expect(p50).toBeLessThan(2 * percentile(idle, 0.5) + 25);
  } finally {
    await processor.stop();
  }
});

async function answerLatencies(prefix: string, n: number): Promise<number[]> {
  const latencies: number[] = [];
  for (let i = 0; i < n; i++) {
    const signed = signStandard({ id: `${prefix}-${i}`, body: '{"type":"slow"}', timestampMs: Date.now() });
    const started = performance.now();
    const answer = await post(`${server.url}/hooks/billing`, signed);
    latencies.push(performance.now() - started);
    expect(answer.status).toBe(202);
  }
  return latencies;
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;
}
