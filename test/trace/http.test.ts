/**
 * An HTTP caller's trace continues into the request's operation, on every integration: idem's
 * `idem.run` span is a child of the span the request's `traceparent` names (same trace id, that
 * span as parent), and the request's row records the caller's span as the context it was started
 * in, so what the request causes (outbox events, the consumer in another process: brokers.test.ts)
 * is in the caller's trace. An invalid `traceparent` is ignored: the operation starts a trace of
 * its own, and the row records none.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { frameworks, type RunningApp } from '../support/http/apps.js';
import { client, type Send } from '../support/http/client.js';
import { createHarness, type Harness } from '../support/http/harness.js';
import { installMemoryTracer, type RecordedSpan } from './memory-tracer.js';

const spans: RecordedSpan[] = installMemoryTracer();

describe.each(frameworks)('an HTTP caller’s trace on $name', (framework) => {
  let h: Harness;
  let app: RunningApp;
  let send: Send;

  beforeAll(async () => {
    h = await createHarness();
    app = await framework.start(h);
    send = client(app.url);
  });
  afterAll(async () => {
    await app?.close();
    await h?.close();
  });

  /** Sends one first request for `key` with `traceparent`; the `idem.run` span it caused. */
  async function request(key: string, traceparent: string) {
    const before = spans.length;
    const response = await send('/orders', { key, body: { amount: 10 }, headers: { traceparent } });
    expect(response.status).toBe(201);
    const runs = spans.slice(before).filter((span) => span.name === 'idem.run');
    expect(runs).toHaveLength(1);
    const { rows } = await h.db.pool.query<{ traceparent: string | null }>(
      `SELECT traceparent FROM "${h.schema}".requests WHERE idempotency_key = $1`,
      [key],
    );
    return { run: runs[0]!, recorded: rows[0]?.traceparent ?? null };
  }

  it('the operation’s span is a child of the caller’s span, and its row records that trace', async () => {
    const traceId = randomBytes(16).toString('hex');
    const callerSpan = randomBytes(8).toString('hex');
    const { run, recorded } = await request(
      `t-${randomBytes(6).toString('hex')}`,
      `00-${traceId}-${callerSpan}-01`,
    );
    expect(run.traceId).toBe(traceId);
    expect(run.parentSpanId).toBe(callerSpan);
    // The request's row names the context it was started in: the caller's span.
    expect(recorded).toBe(`00-${traceId}-${callerSpan}-01`);
  });

  it('an invalid traceparent is ignored: the operation starts its own trace', async () => {
    const zeros = `00-${'0'.repeat(32)}-${randomBytes(8).toString('hex')}-01`;
    const { run, recorded } = await request(`t-${randomBytes(6).toString('hex')}`, zeros);
    expect(run.traceId).not.toBe('0'.repeat(32));
    expect(run.parentSpanId).toBeNull();
    expect(recorded).toBeNull();
  });
});
