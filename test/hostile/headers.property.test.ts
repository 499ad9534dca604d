/**
 * Hostile framing and content headers around a valid key: lying or malformed Content-Length,
 * conflicting lengths, an oversized header section, and arbitrary Content-Type values. Never a
 * 5xx, never a stack trace, never a partial record; what idem answers itself is a problem document.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post, rawRequest } from './support/raw-http.js';
import { expectNoLeak, expectProblem } from './support/expect-answer.js';
import { startSurfaces, type Surfaces } from './support/servers.js';

let s: Surfaces;
beforeAll(async () => {
  s = await startSurfaces();
});
afterAll(() => s.close());

const surfaces = [
  { name: 'node:http', port: () => s.nodePort },
  { name: 'fastify', port: () => s.fastifyPort },
];

const request = (port: number, lines: string[], body: string) =>
  rawRequest(port, ['POST /orders HTTP/1.1', 'Host: 127.0.0.1', 'Connection: close', ...lines], body);

describe.each(surfaces)('$name', ({ name, port }) => {
  it('malformed, conflicting and lying Content-Length: a 4xx and nothing stored', async () => {
    const body = '{"amount":1}';
    const cases: [string, string[]][] = [
      ['not a number', ['Content-Length: abc']],
      ['negative', ['Content-Length: -5']],
      ['two different values', [`Content-Length: ${body.length}`, 'Content-Length: 3']],
      ['shorter than the body (truncated JSON)', ['Content-Length: 5']],
      ['with Transfer-Encoding too', [`Content-Length: ${body.length}`, 'Transfer-Encoding: chunked']],
    ];
    for (const [what, lines] of cases) {
      const before = await s.counts();
      const response = await request(
        port(),
        ['Content-Type: application/json', `Idempotency-Key: cl-${randomUUID()}`, ...lines],
        body,
      );
      expectNoLeak(response);
      expect(response.status, what).toBeGreaterThanOrEqual(400);
      expect(await s.counts(), what).toEqual(before);
    }
  });

  it('a header section over the server limit: 431, nothing stored', async () => {
    const before = await s.counts();
    const response = await request(
      port(),
      [
        'Content-Type: application/json',
        `Idempotency-Key: big-${randomUUID()}`,
        `X-Pad: ${'p'.repeat(20 * 1024)}`,
        'Content-Length: 2',
      ],
      '{}',
    );
    expectNoLeak(response);
    expect(response.status).toBe(431);
    expect(await s.counts()).toEqual(before);
  });

  it('any Content-Type: stored once or refused with nothing stored; idem-side refusals are problems', async () => {
    const contentType = fc.oneof(
      fc.stringMatching(/^[a-z]{1,10}\/[a-z0-9.+-]{1,16}$/),
      fc.constantFrom(
        'application/json; charset=utf-16',
        'application/json; charset=latin1',
        'application/problem+json',
        'text/plain',
        'application/octet-stream',
        ';',
        'application/json;;;',
        '*/*',
      ),
      fc.string({ maxLength: 40 }).filter((t) => /^[\x20-\x7e]*$/.test(t)),
    );
    await fc.assert(
      fc.asyncProperty(contentType, async (type) => {
        const before = await s.counts();
        const response = await post(port(), {
          keys: [`ct-${randomUUID()}`],
          contentType: type,
          body: '{"amount":1}',
        });
        const after = await s.counts();
        expectNoLeak(response);
        if (response.status === 201) {
          expect(after.orders - before.orders).toBe(1);
          return;
        }
        expect(after).toEqual(before);
        // Fastify refuses a media type it has no parser for (415) before idem's hooks see the body.
        if (name === 'fastify' && response.status === 415) return;
        expectProblem(response);
      }),
      { numRuns: 60 },
    );
  });
});

describe('fastify', () => {
  // KNOWN GAP (reported): idem/fastify turns Fastify's body-too-large and invalid-JSON errors into
  // problem documents, but not its 415 for a media type without a parser, which goes out as
  // Fastify's own `application/json` error. Nothing is stored and it is a 4xx; only the format is
  // wrong. This test flips (and must be turned into a plain `it`) once the integration maps 415.
  it.fails('answers an unsupported media type with a problem document', async () => {
    const response = await post(s.fastifyPort, {
      keys: [`ct-${randomUUID()}`],
      contentType: 'application/x-unknown',
      body: '{"amount":1}',
    });
    expectProblem(response, 415);
  });
});
