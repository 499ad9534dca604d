/**
 * The demo's webhook receiver (`POST /webhooks/provider`, Standard Webhooks) against hostile
 * deliveries over raw sockets: unsigned, wrongly signed, stale or future, malformed and repeated
 * delivery ids, control bytes, bodies past the demo's 64 KiB. An unverified delivery gets a 4xx
 * problem and leaves nothing: no receipt, no refund, no ledger entry. A verified delivery with
 * hostile content (NUL, an unknown charge, a negative amount) is stored once and never answered
 * 5xx, and it moves no money. Real demo, real sockets.
 */
import { createHmac, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demoWebhookSecret } from '../../demo/config.js';
import { headerLine, postHead, rawRequest, type RawResponse } from '../support/hostile/raw-http.js';
import { expectNoLeak, expectProblem } from '../support/hostile/expect-answer.js';
import { startHostileDemo, type HostileDemo } from '../support/hostile/demo.js';

let h: HostileDemo;
let charge: { id: string; paymentId: string };
beforeAll(async () => {
  h = await startHostileDemo();
  // One real payment, so a refund event could name a real charge.
  const response = await fetch(`${h.demo.url}/v1/payments`, {
    method: 'POST',
    headers: {
      authorization: 'Bearer sk_test_acme',
      'idempotency-key': `wh-${randomUUID()}`,
      'content-type': 'application/json',
    },
    body: JSON.stringify({ amount: 900, currency: 'eur', customer: 'hook_target' }),
  });
  const payment = (await response.json()) as { id: string; charge_id: string };
  charge = { id: payment.charge_id, paymentId: payment.id };
});
afterAll(() => h?.close());

const key = Buffer.from(demoWebhookSecret.slice('whsec_'.length), 'base64');
const sign = (id: string, timestamp: string, body: Buffer) =>
  'v1,' + createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest('base64');
const now = () => String(Math.floor(Date.now() / 1000));

interface Delivery {
  ids?: (string | Buffer)[];
  timestamp?: string;
  signature?: string | null;
  body?: string | Buffer;
  lines?: string[];
}

function deliver(d: Delivery = {}): Promise<RawResponse> {
  const body = typeof d.body === 'string' ? Buffer.from(d.body) : (d.body ?? refund(100));
  const ids = d.ids ?? [`msg_${randomUUID()}`];
  const timestamp = d.timestamp ?? now();
  const first = ids[0];
  const signature =
    d.signature === undefined
      ? sign(typeof first === 'string' ? first : (first?.toString('latin1') ?? ''), timestamp, body)
      : d.signature;
  const head = postHead('/webhooks/provider', body);
  for (const id of ids) head.push(headerLine('webhook-id', typeof id === 'string' ? Buffer.from(id) : id));
  head.push(`webhook-timestamp: ${timestamp}`);
  if (signature !== null) head.push(`webhook-signature: ${signature}`);
  head.push(...(d.lines ?? []));
  return rawRequest(h.port, head, body);
}

function refund(amount: unknown, chargeId: unknown = charge?.id, version: unknown = 1): Buffer {
  return Buffer.from(
    JSON.stringify({ type: 'charge.refunded', data: { charge_id: chargeId, amount, version } }),
  );
}

/** What the payment and the ledger say about the target charge: money that moved. */
async function money() {
  const { rows } = await h.demo.pool.query<{ status: string; refunded: string }>(
    `SELECT status, refunded::text FROM "${h.schema}_demo".payments WHERE id = $1`,
    [charge.paymentId],
  );
  return { payment: rows[0], counts: await h.counts() };
}

/** `status` undefined: any 4xx will do (the receiver's to choose), as long as nothing is stored. */
async function expectRefused(d: Delivery, status?: number, type?: string): Promise<void> {
  const before = await money();
  const response = await deliver(d);
  if (response.headers['content-type']?.[0]?.startsWith('application/problem+json')) {
    const problem = expectProblem(response, status);
    if (type) expect(problem.type).toBe(type);
  } else {
    // Refused by Node's HTTP parser before the receiver ran (a control byte in a header).
    expectNoLeak(response);
    expect(response.status).toBe(status ?? 400);
  }
  expect(response.status).toBeGreaterThanOrEqual(400);
  expect(await money()).toEqual(before);
}

describe('unverified deliveries: a 4xx problem, nothing stored', () => {
  it('no signature, a wrong one, a signature of other bytes', async () => {
    const unauthorized = 'urn:idem:problem:webhook-unauthorized';
    await expectRefused({ signature: null }, 401, unauthorized);
    await expectRefused({ signature: 'v1,AAAA' }, 401, unauthorized);
    await expectRefused({ signature: `v1,${Buffer.alloc(32).toString('base64')}` }, 401, unauthorized);
    const id = `msg_${randomUUID()}`;
    await expectRefused(
      { ids: [id], signature: sign(id, now(), refund(5)), body: refund(900) },
      401,
      unauthorized,
    );
  });

  it('a timestamp too old, in the future, or not a number', async () => {
    const at = (t: string) => {
      const id = `msg_${randomUUID()}`;
      return { ids: [id], timestamp: t, signature: sign(id, t, refund(100)) };
    };
    await expectRefused(at(String(Number(now()) - 3600)), 401);
    await expectRefused(at(String(Number(now()) + 3600)), 401);
    for (const t of ['abc', '1e3', '-1', '']) {
      const response = await deliver(at(t));
      expectProblem(response);
      expect(response.status).toBeLessThan(500);
    }
  });

  it('a delivery id that is malformed, given twice, or holds a control byte', async () => {
    await expectRefused({ ids: ['a.b'] }, 400, 'urn:idem:problem:webhook-malformed');
    // Two id lines: refused (the signature cannot match both), whichever line a proxy keeps.
    await expectRefused({ ids: [`msg_${randomUUID()}`, `msg_${randomUUID()}`] });
    await expectRefused({ ids: [`msg_${randomUUID()}`, ''] });
    await expectRefused({ ids: [Buffer.from('msg_\x00nul')] }, 400);
    await expectRefused({ ids: [Buffer.from('msg_\x01ctl')] }, 400);
  });

  it("a body over the demo's 64 KiB: 413, even correctly signed", async () => {
    const big = Buffer.from(
      JSON.stringify({ type: 'charge.refunded', data: { pad: 'x'.repeat(70 * 1024) } }),
    );
    await expectRefused({ body: big }, 413, 'urn:idem:problem:webhook-too-large');
  });
});

describe('verified deliveries with hostile content', () => {
  it.each([
    ['a NUL in the charge id', refund(100, 'ch_\u0000x')],
    ['an unknown charge', refund(100, 'ch_doesnotexist')],
    ['a negative amount', refund(-500)],
    ['an amount that is a string', refund('100')],
    ['a huge version', refund(1, undefined, 1e308)],
    ['not JSON at all', Buffer.from('\u0000\u0001 not json')],
  ])('%s: stored once, never a 5xx, no money moves', async (_what, body) => {
    const before = await money();
    const id = `msg_${randomUUID()}`;
    const first = await deliver({ ids: [id], body });
    expectNoLeak(first);
    expect(first.status).toBeLessThan(300);
    const again = await deliver({ ids: [id], body });
    expectNoLeak(again);
    expect(again.status).toBeLessThan(300);
    // Give the processor time to try it.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const after = await money();
    expect(after.payment).toEqual(before.payment);
    expect(after.counts).toEqual({ ...before.counts, receipts: before.counts.receipts + 1 });
  });
});
