/**
 * Hostile bodies under valid keys: invalid JSON, deep nesting, huge numbers, duplicate object
 * keys, bodies over the limit (declared or streamed). Each request is either refused with a 4xx
 * problem document and nothing stored, or handled once with the body the fingerprint saw; never a
 * 5xx, never a stack trace.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post, rawRequest } from '../support/hostile/raw-http.js';
import { expectNoLeak, expectProblem } from '../support/hostile/expect-answer.js';
import { startSurfaces, surfacesOf, type Surfaces } from '../support/hostile/servers.js';

let s: Surfaces;
beforeAll(async () => {
  s = await startSurfaces();
});
afterAll(() => s.close());

const isJson = (text: string) => {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
};

const nested = (depth: number, kind: 'array' | 'object') =>
  kind === 'array' ? '['.repeat(depth) + ']'.repeat(depth) : '{"a":'.repeat(depth) + '0' + '}'.repeat(depth);

const hostileBody: fc.Arbitrary<string> = fc.oneof(
  fc.string({ maxLength: 200 }).filter((t) => t.trim() !== '' && !isJson(t)), // invalid JSON
  fc.constantFrom(
    '{',
    '{"a":',
    '[1,]',
    '{"a":1,}',
    "{'a':1}",
    'NaN',
    '{"a":NaN}',
    '\ufeff{}',
    '{"a":"\\x"}',
    '"\\ud800"',
  ),
  fc
    .tuple(fc.integer({ min: 500, max: 60_000 }), fc.constantFrom('array' as const, 'object' as const))
    .map(([d, k]) => nested(d, k)),
  fc.integer({ min: 309, max: 99_999 }).map((e) => `{"amount":1e${e}}`), // overflows to Infinity
  fc.integer({ min: 309, max: 3000 }).map((n) => `{"amount":${'9'.repeat(n)}}`),
  fc.integer({ min: 17, max: 300 }).map((n) => `{"amount":${'9'.repeat(n)}}`), // finite, past 2^53
  fc
    .tuple(fc.jsonValue(), fc.jsonValue())
    .map(([a, b]) => `{"a":${JSON.stringify(a)},"a":${JSON.stringify(b)}}`), // duplicate keys
  fc.json({ maxDepth: 4 }), // valid JSON of any shape
);

const surfaces = surfacesOf(() => s);

describe.each(surfaces)('$name', ({ port }) => {
  it('a hostile body: a 4xx problem with nothing stored, or one row holding what was parsed', async () => {
    await fc.assert(
      fc.asyncProperty(hostileBody, async (body) => {
        const before = await s.counts();
        const response = await post(port(), { keys: [`b-${randomUUID()}`], body });
        const after = await s.counts();
        expectNoLeak(response);
        if (response.status === 201) {
          // Fastify's parser drops a leading byte order mark (RFC 8259 §8.1 allows it).
          expect(isJson(body.replace(/^\ufeff/, ''))).toBe(true);
          expect(after.orders - before.orders).toBe(1);
          expect(after.requests - before.requests).toBe(1);
          return;
        }
        expectProblem(response);
        expect(after).toEqual(before);
      }),
      { numRuns: 100 },
    );
  });

  it('duplicate object keys: the fingerprint sees the value the handler sees (last one wins)', async () => {
    const key = `dup-${randomUUID()}`;
    const first = await post(port(), { keys: [key], body: '{"amount":1,"amount":2}' });
    expect(first.status).toBe(201);
    // The same parsed request: a replay.
    const same = await post(port(), { keys: [key], body: '{"amount":2}' });
    expect(same.status).toBe(201);
    expect(same.headers['idempotent-replayed']?.[0]).toBe('true');
    // The duplicates the other way round parse to another request: refused as key reuse.
    const other = await post(port(), { keys: [key], body: '{"amount":2,"amount":1}' });
    expect(expectProblem(other, 422).code).toBe('IDEM_KEY_REUSED');
  });

  it('examples named by the issue', async () => {
    const cases: [string, string, number, string][] = [
      ['invalid JSON', '{"amount":', 400, 'IDEM_BODY_MALFORMED'],
      ['deep nesting (100 000 arrays)', nested(100_000, 'array'), 400, 'IDEM_BODY_MALFORMED'],
      ['deep nesting (40 000 objects)', nested(40_000, 'object'), 400, 'IDEM_BODY_MALFORMED'],
      ['a number past double range', '{"amount":1e400}', 400, 'IDEM_BODY_MALFORMED'],
      ['a 5 000-digit integer', `{"amount":${'9'.repeat(5000)}}`, 400, 'IDEM_BODY_MALFORMED'],
      ['a body over the limit (declared)', `"${'a'.repeat(300 * 1024)}"`, 413, 'IDEM_BODY_TOO_LARGE'],
    ];
    for (const [name, body, status, code] of cases) {
      const before = await s.counts();
      const response = await post(port(), { keys: [`e-${randomUUID()}`], body });
      expect(expectProblem(response, status).code, name).toBe(code);
      expect(await s.counts(), name).toEqual(before);
    }
  });

  it('a body over the limit without Content-Length (chunked) is refused with 413 and nothing stored', async () => {
    const before = await s.counts();
    const chunk = Buffer.from(`"${'a'.repeat(64 * 1024)}`);
    const parts: Buffer[] = [];
    for (let i = 0; i < 5; i++)
      parts.push(Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n'));
    parts.push(Buffer.from('0\r\n\r\n'));
    const response = await rawRequest(
      port(),
      [
        'POST /orders HTTP/1.1',
        'Host: 127.0.0.1',
        'Connection: close',
        'Content-Type: application/json',
        'Transfer-Encoding: chunked',
        `Idempotency-Key: chunked-${randomUUID()}`,
      ],
      Buffer.concat(parts),
    );
    expect(expectProblem(response, 413).code).toBe('IDEM_BODY_TOO_LARGE');
    expect(await s.counts()).toEqual(before);
  });
});
