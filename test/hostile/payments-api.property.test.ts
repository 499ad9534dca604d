/**
 * A property over the demo's payments API: whatever JSON body (or non-JSON bytes) and whatever
 * set of Authorization, Idempotency-Key and Content-Type lines a client sends, the answer is never
 * a 5xx nor a stack trace, and no key is ever left pending (a stuck operation an operator would be
 * paged for). Keys are drawn from a small pool too, so the same key meets different bodies.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { rawRequest } from '../support/hostile/raw-http.js';
import { expectNoLeak } from '../support/hostile/expect-answer.js';
import { startHostileDemo, type HostileDemo } from '../support/hostile/demo.js';

let h: HostileDemo;
beforeAll(async () => {
  h = await startHostileDemo();
});
afterAll(() => h?.close());

const anyJson = fc.jsonValue({ maxDepth: 3 });

/** A payment as a client means it; some customers are not acceptable (control characters). */
const payment = fc
  .record({
    amount: fc.integer({ min: 1, max: 10_000_000 }),
    currency: fc.constantFrom('eur', 'usd', 'jpy'),
    customer: fc.oneof(
      fc.stringMatching(/^[a-z_]{1,20}$/),
      fc.string({ unit: 'grapheme', minLength: 1, maxLength: 20 }),
      fc.string({ unit: 'binary', minLength: 1, maxLength: 20 }), // lone surrogates too
      fc.constantFrom('declined_eve', 'a\u0000b', '\u0085', ' '),
    ),
  })
  .map((b) => JSON.stringify(b));

/** Bodies: payments, payments with fields of any JSON type, extra fields, any JSON, not JSON. */
const body: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: payment },
  fc
    .record({ amount: anyJson, currency: anyJson, customer: anyJson }, { requiredKeys: [] })
    .map((b) => JSON.stringify(b)),
  fc
    .tuple(fc.string({ maxLength: 12 }), anyJson)
    .map(([key, value]) => JSON.stringify({ amount: 1, currency: 'eur', customer: 'x', [key]: value })),
  anyJson.map((v) => JSON.stringify(v)),
  fc.string({ maxLength: 60 }),
  fc.constantFrom('', '{', 'null', '{"__proto__":{"a":1}}', '{"constructor":{"prototype":{"a":1}}}'),
);

const printable = fc.string({ maxLength: 40 }).filter((t) => /^[\x20-\x7e]*$/.test(t));
const keyPool = Array.from({ length: 4 }, (_, i) => `pool-${randomUUID()}-${i}`);

/** Header lines: zero, one or two Authorization lines; zero, one or two keys; any Content-Type. */
const anyHeaders: fc.Arbitrary<string[]> = fc
  .tuple(
    fc.array(
      fc.oneof(
        fc.constantFrom('Bearer sk_test_acme', 'Bearer sk_test_tenant_b', '', 'Bearer', 'Basic YWNtZTo='),
        printable,
      ),
      { maxLength: 2 },
    ),
    fc.array(
      fc.oneof(
        fc.constant(null).map(() => `prop-${randomUUID()}`),
        fc.constantFrom(...keyPool),
        fc.constantFrom('', ' ', '"a", "b"', '"unterminated', 'x'.repeat(300)),
        printable,
      ),
      { maxLength: 2 },
    ),
    fc.option(
      fc.oneof(
        fc.constantFrom(
          'application/json',
          'application/json; charset=utf-8',
          'application/merge-patch+json',
          'text/plain',
          'application/x-www-form-urlencoded',
          'multipart/form-data; boundary=x',
        ),
        printable,
      ),
      { nil: undefined },
    ),
  )
  .map(([auth, keys, type]) => [
    ...auth.map((a) => `Authorization: ${a}`),
    ...keys.map((k) => `Idempotency-Key: ${k}`),
    ...(type === undefined ? [] : [`Content-Type: ${type}`]),
  ]);

/** What a well-behaved client sends, so that bodies get past the headers often enough. */
const wellFormed: fc.Arbitrary<string[]> = fc
  .oneof(
    fc.constant(null).map(() => `prop-${randomUUID()}`),
    fc.constantFrom(...keyPool),
  )
  .map((key) => [
    'Authorization: Bearer sk_test_acme',
    `Idempotency-Key: ${key}`,
    'Content-Type: application/json',
  ]);

const headers = fc.oneof({ weight: 3, arbitrary: wellFormed }, { weight: 2, arbitrary: anyHeaders });

it('arbitrary bodies and header sets: never a 5xx, never a key left pending', async () => {
  let answered = 0;
  await fc.assert(
    fc.asyncProperty(body, headers, async (text, lines) => {
      const bytes = Buffer.from(text, 'utf8');
      const response = await rawRequest(
        h.port,
        [
          'POST /v1/payments HTTP/1.1',
          'Host: 127.0.0.1',
          'Connection: close',
          `Content-Length: ${bytes.length}`,
          ...lines,
        ],
        bytes,
      );
      expectNoLeak(response);
      if (response.status < 300) answered++;
      expect((await h.counts()).pending).toBe(0);
    }),
    { numRuns: 150 },
  );
  // The property is not vacuous: some requests were valid and charged.
  expect(answered).toBeGreaterThan(0);
});
