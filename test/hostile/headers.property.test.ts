/**
 * Hostile framing and content headers around a valid key: lying or malformed Content-Length,
 * conflicting lengths, an oversized header section, and arbitrary Content-Type values. Never a
 * 5xx, never a stack trace, never a partial record; what idem answers itself is a problem document.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import Fastify, { type FastifyError } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { idempotency } from 'idem/fastify';
import { createIdem } from 'idem';
import { post, rawRequest } from '../support/hostile/raw-http.js';
import { expectNoLeak, expectProblem } from '../support/hostile/expect-answer.js';
import { startSurfaces, type Surfaces } from '../support/hostile/servers.js';

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

describe.each(surfaces)('$name', ({ port }) => {
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
        // Fastify's own refusal of a media type without a parser (415) is a problem document too.
        expectProblem(response);
      }),
      { numRuns: 60 },
    );
  });
});

describe('fastify', () => {
  // Fastify refuses these bodies in its content-type parser, before any hook of idem runs; on a
  // keyed request the plugin's route error handler answers them as idem's problem documents.
  it('answers an unsupported media type with a problem document, nothing stored', async () => {
    const before = await s.counts();
    const response = await post(s.fastifyPort, {
      keys: [`ct-${randomUUID()}`],
      contentType: 'application/x-unknown',
      body: '{"amount":1}',
    });
    const document = expectProblem(response, 415);
    expect(document.type).toBe('urn:idem:problem:media-type-unsupported');
    expect(document.code).toBe('IDEM_MEDIA_TYPE_UNSUPPORTED');
    expect(await s.counts()).toEqual(before);
  });

  it('answers invalid JSON and an empty JSON body with body-malformed problems', async () => {
    const cases: [string, string[], string][] = [
      ['invalid JSON', ['Content-Type: application/json', 'Content-Length: 9'], '{"amount"'],
      ['empty JSON body', ['Content-Type: application/json', 'Content-Length: 0'], ''],
    ];
    for (const [what, lines, body] of cases) {
      const before = await s.counts();
      const response = await request(s.fastifyPort, [`Idempotency-Key: bm-${randomUUID()}`, ...lines], body);
      const document = expectProblem(response, 400);
      expect(document.type, what).toBe('urn:idem:problem:body-malformed');
      expect(await s.counts(), what).toEqual(before);
    }
  });

  it("leaves every other error to the application's error handlers", async () => {
    const idem = createIdem({ sql: fromPg(s.db.pool), schema: s.db.schema });
    const app = Fastify({ logger: false });
    await app.register(idempotency, { idem, tenant: () => 'acme' });
    const fail = (status: number, message: string) =>
      Object.assign(new Error(message), { statusCode: status });
    app.post('/throws', { config: { idempotency: { required: false } } }, async () => {
      throw fail(418, 'handler failed');
    });
    app.post(
      '/auth',
      {
        preHandler: async () => {
          throw fail(401, 'who are you');
        },
      },
      async () => ({ ok: true }),
    );
    app.post(
      '/own',
      {
        errorHandler: (error: FastifyError, _request, reply) =>
          void reply.code(409).send({ route: error.message }),
      },
      async () => {
        throw fail(500, 'own handler');
      },
    );
    app.setErrorHandler((error: FastifyError, _request, reply) =>
      reply.code(error.statusCode ?? 500).send({ app: error.message }),
    );
    try {
      const send = (url: string, contentType: string, key: string | null) =>
        app.inject({
          method: 'POST',
          url,
          headers: { 'content-type': contentType, ...(key ? { 'idempotency-key': key } : {}) },
          payload: '{"amount":1}',
        });
      const json = 'application/json';
      const unknown = 'application/x-unknown';

      // The handler's error, an authentication hook's, a route's own handler: the application's.
      const thrown = await send('/throws', json, `e-${randomUUID()}`);
      expect([thrown.statusCode, thrown.json()]).toEqual([418, { app: 'handler failed' }]);
      const auth = await send('/auth', json, `e-${randomUUID()}`);
      expect([auth.statusCode, auth.json()]).toEqual([401, { app: 'who are you' }]);
      const own = await send('/own', json, `e-${randomUUID()}`);
      expect([own.statusCode, own.json()]).toEqual([409, { route: 'own handler' }]);

      // Fastify's body refusal of a keyed request is idem's, whatever handler the route has.
      const refused = await send('/own', unknown, `e-${randomUUID()}`);
      expect(refused.statusCode).toBe(415);
      expect(refused.headers['content-type']).toBe('application/problem+json');
      expect(refused.json()).toMatchObject({ type: 'urn:idem:problem:media-type-unsupported', status: 415 });

      // Without a key idem is not involved: the application answers as it would anyway.
      const keyless = await send('/throws', unknown, null);
      expect(keyless.statusCode).toBe(415);
      expect(keyless.json()).toEqual({ app: 'Unsupported Media Type' });
    } finally {
      await app.close();
    }
  });
});
