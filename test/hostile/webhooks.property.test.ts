/**
 * Hostile deliveries against the webhook receiver (node:http adapter, Standard Webhooks verifier)
 * over raw sockets: wrong signatures, skewed and malformed timestamps, malformed and repeated
 * delivery ids, and hostile bodies. An unverified delivery gets a 4xx problem and leaves no
 * receipt; a verified one is stored once whatever its body (the receiver never parses it for
 * trust); never a 5xx, never a stack trace, never a signature or secret in the receiver's log.
 */
import { createHmac, randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { headerLine, postHead, rawRequest, type RawResponse } from '../support/hostile/raw-http.js';
import { expectNoLeak, expectProblem, parserAccepts } from '../support/hostile/expect-answer.js';
import { startSurfaces, webhookSecret, type Surfaces } from '../support/hostile/servers.js';

let s: Surfaces;
beforeAll(async () => {
  s = await startSurfaces();
});
afterAll(() => s.close());

const key = Buffer.from(webhookSecret.slice('whsec_'.length), 'base64');
const sign = (id: string, timestamp: string, body: string | Buffer, secret: Buffer = key) =>
  'v1,' + createHmac('sha256', secret).update(`${id}.${timestamp}.`).update(body).digest('base64');
const now = () => String(Math.floor(Date.now() / 1000));

interface Delivery {
  id?: string | Buffer;
  ids?: (string | Buffer)[];
  timestamp?: string;
  signature?: string;
  body?: string | Buffer;
}

function deliver(d: Delivery): Promise<RawResponse> {
  const body = typeof d.body === 'string' ? Buffer.from(d.body) : (d.body ?? Buffer.from('{"type":"ping"}'));
  const head = postHead('/webhooks', body);
  for (const id of d.ids ?? (d.id === undefined ? [] : [d.id])) head.push(headerLine('webhook-id', id));
  if (d.timestamp !== undefined) head.push(`webhook-timestamp: ${d.timestamp}`);
  if (d.signature !== undefined) head.push(`webhook-signature: ${d.signature}`);
  return rawRequest(s.webhookPort, head, body);
}

async function expectRefused(d: Delivery, status: number, code?: string): Promise<void> {
  const before = await s.counts();
  const response = await deliver(d);
  const problem = expectProblem(response, status);
  if (code) expect(problem.code).toBe(code);
  expect(await s.counts()).toEqual(before);
}

describe('signatures', () => {
  it('agree with the standardwebhooks reference signer', () => {
    const id = `msg_${randomUUID()}`;
    const at = new Date();
    const body = '{"type":"ping"}';
    expect(sign(id, String(Math.floor(at.getTime() / 1000)), body)).toBe(
      new Webhook(webhookSecret).sign(id, at, body),
    );
  });

  it('any wrong signature: 401 problem, no receipt', async () => {
    const body = '{"type":"charge.refunded","data":{"amount":5}}';
    const wrong = fc.oneof(
      fc.string({ minLength: 1, maxLength: 120 }).filter((t) => /^[\x21-\x7e ]+$/.test(t) && t.trim() !== ''),
      fc.uint8Array({ minLength: 32, maxLength: 32 }).map((b) => `v1,${Buffer.from(b).toString('base64')}`),
      fc.uint8Array({ minLength: 64, maxLength: 64 }).map((b) => `v1a,${Buffer.from(b).toString('base64')}`),
      fc
        .uint8Array({ minLength: 8, maxLength: 40 })
        .map((b) => sign('x', '1', Buffer.from(b), Buffer.from(b))), // another secret
      fc.string({ maxLength: 20 }).map((junk) => `v1,${junk}`),
      fc
        .array(fc.uint8Array({ minLength: 32, maxLength: 32 }), { minLength: 2, maxLength: 4 })
        .map((list) => list.map((b) => `v1,${Buffer.from(b).toString('base64')}`).join(' ')),
    );
    await fc.assert(
      fc.asyncProperty(wrong, async (signature) => {
        await expectRefused(
          { id: `msg_${randomUUID()}`, timestamp: now(), signature, body },
          401,
          'IDEM_WEBHOOK_UNAUTHORIZED',
        );
      }),
      { numRuns: 60 },
    );
  });

  it('a valid signature over something else: another body, id, or timestamp', async () => {
    const id = `msg_${randomUUID()}`;
    const ts = now();
    const body = '{"type":"charge.refunded","data":{"amount":5}}';
    await expectRefused(
      {
        id,
        timestamp: ts,
        signature: sign(id, ts, '{"type":"charge.refunded","data":{"amount":500}}'),
        body,
      },
      401,
    );
    await expectRefused({ id, timestamp: ts, signature: sign(`msg_${randomUUID()}`, ts, body), body }, 401);
    await expectRefused({ id, timestamp: ts, signature: sign(id, String(Number(ts) - 1), body), body }, 401);
    await expectRefused({ id, timestamp: ts, body }, 401);
    await expectRefused({ id, timestamp: ts, signature: '', body }, 401);
  });
});

describe('timestamps', () => {
  it('skewed beyond the tolerance either way: 401 even with a valid signature; inside it: stored', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 301, max: 10 * 365 * 86_400 }),
        fc.boolean(),
        async (skew, future) => {
          const id = `msg_${randomUUID()}`;
          const ts = String(Math.floor(Date.now() / 1000) + (future ? skew : -skew));
          const body = '{"type":"ping"}';
          await expectRefused(
            { id, timestamp: ts, signature: sign(id, ts, body), body },
            401,
            'IDEM_WEBHOOK_UNAUTHORIZED',
          );
        },
      ),
      { numRuns: 30 },
    );
    const id = `msg_${randomUUID()}`;
    const ts = String(Math.floor(Date.now() / 1000) - 200);
    const before = await s.counts();
    expect((await deliver({ id, timestamp: ts, signature: sign(id, ts, '{}'), body: '{}' })).status).toBe(
      202,
    );
    expect((await s.counts()).receipts).toBe(before.receipts + 1);
  });

  it('malformed timestamps: 400 problem, signed or not', async () => {
    const malformed = fc.oneof(
      fc.constantFrom('', ' ', '-1', '1.5', '1e9', '0x10', 'NaN', 'now', '+1700000000', '1700000000000000'),
      fc
        .string({ minLength: 1, maxLength: 20 })
        .filter((t) => /^[\x21-\x7e]+$/.test(t) && !/^\d{1,12}$/.test(t)),
    );
    await fc.assert(
      fc.asyncProperty(malformed, async (ts) => {
        const id = `msg_${randomUUID()}`;
        const before = await s.counts();
        const response = await deliver({ id, timestamp: ts, signature: sign(id, ts, '{}'), body: '{}' });
        expect([400, 401]).toContain(response.status); // a blank value reads as missing (400) or fails the check
        expectProblem(response);
        expect(await s.counts()).toEqual(before);
      }),
      { numRuns: 40 },
    );
  });
});

describe('delivery ids', () => {
  it('malformed ids (blank, too long, spaces, non-ASCII, control bytes): 400 or the parser refusal, no receipt', async () => {
    const badId = fc.oneof(
      fc.constantFrom('', 'has space', 'a'.repeat(256), 'tab\there'),
      fc
        .string({ unit: 'grapheme', minLength: 1, maxLength: 10 })
        .filter((t) => /[^\x21-\x7e]/.test(t))
        .map((t) => Buffer.from(t, 'utf8')),
      fc
        .uint8Array({ minLength: 1, maxLength: 20 })
        .filter((b) => !b.includes(0x0d) && !b.includes(0x0a) && b.some((x) => x < 0x21 || x > 0x7e))
        .map((b) => Buffer.from(b)),
    );
    await fc.assert(
      fc.asyncProperty(badId, async (id) => {
        const text = typeof id === 'string' ? id : id.toString('latin1');
        const ts = now();
        const before = await s.counts();
        const response = await deliver({
          id,
          timestamp: ts,
          signature: sign(text.trim(), ts, '{}'),
          body: '{}',
        });
        expect(await s.counts()).toEqual(before);
        expectNoLeak(response);
        if (parserAccepts(typeof id === 'string' ? Buffer.from(id, 'latin1') : id))
          expectProblem(response, 400);
        else expect(response.status).toBe(400);
      }),
      { numRuns: 40 },
    );
  });

  it('repeated webhook-id lines are refused, even when the signature covers one of them', async () => {
    const a = `msg_${randomUUID()}`;
    const ts = now();
    await expectRefused(
      { ids: [a, `msg_${randomUUID()}`], timestamp: ts, signature: sign(a, ts, '{}'), body: '{}' },
      400,
      'IDEM_WEBHOOK_MALFORMED',
    );
    await expectRefused(
      { ids: [a, a], timestamp: ts, signature: sign(a, ts, '{}'), body: '{}' },
      400,
      'IDEM_WEBHOOK_MALFORMED',
    );
  });
});

describe('bodies of verified deliveries', () => {
  it('any body with a valid signature is stored exactly once; its redelivery is a 200 duplicate', async () => {
    const hostile = fc.oneof(
      fc.string({ maxLength: 200 }),
      fc.constantFrom(
        '{',
        '{"type":',
        '[1,]',
        'NaN',
        '\ufeff{}',
        '{"type":"a","type":"b"}',
        '{"amount":1e400}',
        `{"n":${'9'.repeat(3000)}}`,
      ),
      fc.integer({ min: 1000, max: 30_000 }).map((d) => '['.repeat(d) + ']'.repeat(d)),
      fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)),
    );
    await fc.assert(
      fc.asyncProperty(hostile, async (body) => {
        const id = `msg_${randomUUID()}`;
        const ts = now();
        const before = await s.counts();
        const first = await deliver({ id, timestamp: ts, signature: sign(id, ts, body), body });
        expectNoLeak(first);
        expect(first.status).toBe(202);
        expect((await s.counts()).receipts).toBe(before.receipts + 1);
        const again = await deliver({ id, timestamp: ts, signature: sign(id, ts, body), body });
        expect(again.status).toBe(200);
        expect((await s.counts()).receipts).toBe(before.receipts + 1);
      }),
      { numRuns: 40 },
    );
  });

  it('a body over the limit: 413 problem before anything is stored', async () => {
    const id = `msg_${randomUUID()}`;
    const ts = now();
    const body = `{"pad":"${'x'.repeat(70 * 1024)}"}`;
    await expectRefused(
      { id, timestamp: ts, signature: sign(id, ts, body), body },
      413,
      'IDEM_WEBHOOK_TOO_LARGE',
    );
  });
});

it('the receiver never logs a signature or the secret', () => {
  const text = s.logged.join('\n');
  expect(text.length).toBeGreaterThan(0); // it did log the rejections
  expect(text).not.toContain(webhookSecret);
  expect(text).not.toContain(key.toString('base64'));
  expect(text).not.toMatch(/v1a?,[A-Za-z0-9+/]{20,}/);
});
