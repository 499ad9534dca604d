/**
 * Hostile Idempotency-Key headers against the node:http and Fastify integrations, over raw
 * sockets (fetch would refuse or normalise most of these): empty, 10 KB, control characters,
 * non-ASCII bytes, broken structured-field strings and parameters, lists, and repeated header
 * lines. Every request either runs once under a valid key (201, one row) or is refused with a 4xx
 * problem document and nothing stored; never a 5xx, never a stack trace. Bytes the HTTP parser
 * itself refuses get its bare 400 before any application code runs, and nothing is stored either.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post } from '../support/hostile/raw-http.js';
import { expectNoLeak, expectProblem, parserAccepts } from '../support/hostile/expect-answer.js';
import { startSurfaces, surfacesOf, type Surfaces } from '../support/hostile/servers.js';

let s: Surfaces;
beforeAll(async () => {
  s = await startSurfaces();
});
afterAll(() => s.close());

const bytes = (text: string) => Buffer.from(text, 'latin1');
const noLineBreak = (b: Uint8Array) => !b.includes(0x0d) && !b.includes(0x0a);

/** One hostile key field value, as raw bytes. */
const hostileKey: fc.Arbitrary<Buffer> = fc.oneof(
  fc.constantFrom('', ' ', '\t', '""', '"', '\\', ',', ';').map(bytes),
  fc.integer({ min: 256, max: 10 * 1024 }).map((n) => bytes('k'.repeat(n))), // too long, up to 10 KB
  fc.integer({ min: 254, max: 400 }).map((n) => bytes(`"${'q'.repeat(n)}"`)), // quoted, around the limit
  fc
    .uint8Array({ minLength: 1, maxLength: 40 })
    .filter(noLineBreak)
    .map((b) => Buffer.from(b)), // any bytes
  fc.string({ unit: 'grapheme', minLength: 1, maxLength: 20 }).map((t) => Buffer.from(t, 'utf8')), // non-ASCII
  fc.string({ minLength: 0, maxLength: 30 }).map((t) => bytes(`"${t}`)), // unterminated
  fc.string({ minLength: 1, maxLength: 20 }).map((t) => bytes(`"${t.replaceAll('"', '')}\\x"`)), // bad escape
  fc
    .tuple(fc.stringMatching(/^[a-z0-9-]{1,20}$/), fc.string({ maxLength: 20 }))
    .map(([k, junk]) => bytes(`"${k}";${junk}`)), // parameters
  fc
    .array(fc.stringMatching(/^[a-z0-9-]{1,12}$/), { minLength: 2, maxLength: 4 })
    .map((ks) => bytes(ks.join(', '))), // a list
  fc
    .array(fc.stringMatching(/^[a-z0-9-]{1,12}$/), { minLength: 2, maxLength: 4 })
    .map((ks) => bytes(ks.map((k) => `"${k}"`).join(','))),
  fc
    .tuple(
      fc.stringMatching(/^[a-z]{1,8}$/),
      fc.constantFrom(' ', '\t', '"', ';', ',', '\x7f', '\x80', '\xff'),
    )
    .map(([k, c]) => bytes(`${k}${c}${k}`)),
);

const surfaces = surfacesOf(() => s);

describe.each(surfaces)('$name', ({ port }) => {
  it('one hostile key field: refused with a 4xx problem and nothing stored, or run once under a valid key', async () => {
    await fc.assert(
      fc.asyncProperty(hostileKey, async (key) => {
        const before = await s.counts();
        const response = await post(port(), { keys: [key], body: '{"amount":1}' });
        const after = await s.counts();
        expectNoLeak(response);
        if (response.status === 201) {
          // A value that happens to be a valid key (e.g. a grapheme that is printable ASCII).
          const replayed = response.headers['idempotent-replayed']?.[0] === 'true';
          expect(after.orders - before.orders).toBe(replayed ? 0 : 1);
          expect(after.requests - before.requests).toBe(replayed ? 0 : 1);
          return;
        }
        expect(after).toEqual(before);
        if (parserAccepts(key)) expectProblem(response, 400);
        else expect(response.status).toBe(400); // the HTTP parser's own refusal
      }),
      { numRuns: 120 },
    );
  });

  it('repeated key header lines are refused (400 key-multiple), even when each is valid', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof(fc.stringMatching(/^[a-z0-9-]{1,20}$/).map(bytes), hostileKey), {
          minLength: 2,
          maxLength: 4,
        }),
        async (keys) => {
          const before = await s.counts();
          const response = await post(port(), { keys, body: '{"amount":1}' });
          expectNoLeak(response);
          // Every line counts, blank ones too: a proxy keeping the last line would see another key.
          expect(await s.counts()).toEqual(before);
          // Past Node's 16 KiB header limit the HTTP parser itself answers 431, before idem runs.
          const headerBytes = keys.reduce((n, k) => n + k.length, 0);
          if (headerBytes > 16 * 1024 - 512 && response.status === 431) return;
          if (keys.every(parserAccepts)) expect(expectProblem(response, 400).code).toBe('IDEM_KEY_MULTIPLE');
          else expect(response.status).toBe(400);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('examples named by the issue', async () => {
    const cases: [string, Buffer[], string][] = [
      ['empty', [bytes('')], 'IDEM_KEY_MISSING'],
      ['10 KB', [bytes('k'.repeat(10 * 1024))], 'IDEM_KEY_TOO_LONG'],
      ['non-ASCII', [Buffer.from('clé-ключ-鍵', 'utf8')], 'IDEM_KEY_MALFORMED'],
      ['obs-text byte', [bytes('key\xe9')], 'IDEM_KEY_MALFORMED'],
      ['sf-string with a control character escape', [bytes('"a\\tb"')], 'IDEM_KEY_MALFORMED'],
      ['sf-string, unterminated', [bytes('"abc')], 'IDEM_KEY_MALFORMED'],
      ['sf list', [bytes('"a", "b"')], 'IDEM_KEY_MULTIPLE'],
      ['two fields', [bytes('a'), bytes('b')], 'IDEM_KEY_MULTIPLE'],
      ['two fields, same value', [bytes('same'), bytes('same')], 'IDEM_KEY_MULTIPLE'],
      ['a key, then an empty field', [bytes('order-1'), bytes('')], 'IDEM_KEY_MULTIPLE'],
      ['an empty field, then a key', [bytes(''), bytes('order-1')], 'IDEM_KEY_MULTIPLE'],
    ];
    for (const [name, keys, code] of cases) {
      const before = await s.counts();
      const response = await post(port(), { keys, body: '{"amount":1}' });
      expect(expectProblem(response, 400).code, name).toBe(code);
      expect(await s.counts()).toEqual(before);
    }
    // A control character is refused by the HTTP parser before idem runs: still a 400, nothing stored.
    const before = await s.counts();
    const control = await post(port(), { keys: [bytes('ab\x01c')], body: '{}' });
    expect(control.status).toBe(400);
    expectNoLeak(control);
    expect(await s.counts()).toEqual(before);
  });
});
