/**
 * An HTTP caller's trace in a process with no tracer provider: idem starts no span, but the
 * request's row records the caller's `traceparent` (normalized to version 00), so the trace id
 * still travels from the caller through what the request causes. No tracer is installed in this
 * file, on purpose (http.test.ts is the traced case).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { frameworks, type RunningApp } from '../support/http/apps.js';
import { client, type Send } from '../support/http/client.js';
import { createHarness, type Harness } from '../support/http/harness.js';

describe('an HTTP caller’s trace with no tracer provider', () => {
  let running: { h: Harness; app: RunningApp; send: Send } | undefined;
  beforeAll(async () => {
    const h = await createHarness();
    const app = await frameworks.find((f) => f.name === 'node-http')!.start(h);
    running = { h, app, send: client(app.url) };
  });
  afterAll(async () => {
    await running?.app.close();
    await running?.h.close();
  });

  async function recorded(traceparent: string): Promise<string | null> {
    const key = `u-${randomBytes(6).toString('hex')}`;
    const { h, send } = running!;
    const response = await send('/orders', { key, body: { amount: 10 }, headers: { traceparent } });
    expect(response.status).toBe(201);
    const { rows } = await h.db.pool.query<{ traceparent: string | null }>(
      `SELECT traceparent FROM "${h.schema}".requests WHERE idempotency_key = $1`,
      [key],
    );
    return rows[0]!.traceparent;
  }

  it('the request’s row records the caller’s trace context', async () => {
    const traceId = randomBytes(16).toString('hex');
    const span = randomBytes(8).toString('hex');
    expect(await recorded(`00-${traceId}-${span}-01`)).toBe(`00-${traceId}-${span}-01`);
    // A later version with extra fields is read as version 00 (W3C Trace Context, forward compatible).
    expect(await recorded(`cc-${traceId}-${span}-01-future`)).toBe(`00-${traceId}-${span}-01`);
  });

  it('an invalid traceparent records nothing', async () => {
    expect(await recorded('00-not-a-trace-01')).toBeNull();
    expect(
      await recorded(`ff-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-01`),
    ).toBeNull();
  });
});
