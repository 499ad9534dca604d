/**
 * The demo's payments API against the inputs an attacker tried (issue 15): coerced and wrong JSON
 * types, unknown fields, control characters, NUL in GET inputs, repeated Authorization and
 * Idempotency-Key lines, bodies past the app's 64 KiB limit. Each is answered with a 4xx problem
 * that names what was wrong, and leaves nothing behind: no key (pending or not), no payment, no
 * charge at the provider, no ledger entry, no outbox event, no task. Real demo, real sockets.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawRequest, type RawResponse } from '../support/hostile/raw-http.js';
import { expectNoLeak, expectProblem } from '../support/hostile/expect-answer.js';
import { startHostileDemo, type HostileDemo } from '../support/hostile/demo.js';

let h: HostileDemo;
beforeAll(async () => {
  h = await startHostileDemo();
});
afterAll(() => h?.close());

const valid = { amount: 1250, currency: 'eur', customer: 'alice' };

/** A POST /v1/payments with exactly these header lines and body bytes. */
function pay(body: string | Buffer, lines: string[] = []): Promise<RawResponse> {
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  const has = (name: string) => lines.some((l) => l.toLowerCase().startsWith(`${name}:`));
  return rawRequest(
    h.port,
    [
      'POST /v1/payments HTTP/1.1',
      'Host: 127.0.0.1',
      'Connection: close',
      ...(has('authorization') ? [] : ['Authorization: Bearer sk_test_acme']),
      ...(has('idempotency-key') ? [] : [`Idempotency-Key: hostile-${randomUUID()}`]),
      ...(has('content-type') ? [] : ['Content-Type: application/json']),
      ...(has('content-length') || has('transfer-encoding') ? [] : [`Content-Length: ${bytes.length}`]),
      ...lines,
    ],
    bytes,
  );
}

function get(path: string, lines: string[] = ['Authorization: Bearer sk_test_acme']): Promise<RawResponse> {
  return rawRequest(h.port, [`GET ${path} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close', ...lines]);
}

/** Sends, then checks the status, the problem type, the named field and that nothing moved. */
async function expectRefused(
  send: () => Promise<RawResponse>,
  expected: { status: number; type: string; field?: string },
): Promise<Record<string, unknown>> {
  const before = await h.counts();
  const response = await send();
  const problem = expectProblem(response, expected.status) as unknown as Record<string, unknown>;
  expect(problem.type).toBe(expected.type);
  if (expected.field !== undefined) {
    expect((problem['invalid-params'] as { name: string }[])[0]?.name).toBe(expected.field);
  }
  expect(await h.counts()).toEqual(before);
  return problem;
}

const invalid = 'urn:idem-demo:invalid-request';

describe('POST /v1/payments: types as sent, no coercion', () => {
  it.each([
    ['amount: true (was charged 1)', { ...valid, amount: true }, 'amount'],
    ['amount: "1250"', { ...valid, amount: '1250' }, 'amount'],
    ['amount: "12e2"', { ...valid, amount: '12e2' }, 'amount'],
    ['amount: [77]', { ...valid, amount: [77] }, 'amount'],
    ['amount: 12.5', { ...valid, amount: 12.5 }, 'amount'],
    ['amount: 0', { ...valid, amount: 0 }, 'amount'],
    ['amount: null', { ...valid, amount: null }, 'amount'],
    ['customer: 42 (became "42")', { ...valid, customer: 42 }, 'customer'],
    ['customer: true', { ...valid, customer: true }, 'customer'],
    ['customer: ""', { ...valid, customer: '' }, 'customer'],
    ['customer: 65 characters', { ...valid, customer: 'c'.repeat(65) }, 'customer'],
    ['currency: ["eur"]', { ...valid, currency: ['eur'] }, 'currency'],
    ['currency: "EUR"', { ...valid, currency: 'EUR' }, 'currency'],
    ['a missing field', { amount: 1, currency: 'eur' }, 'customer'],
    ['an unknown field (was dropped silently)', { ...valid, note: 'x' }, 'note'],
    ['an unknown nested-looking field', { ...valid, 'customer.name': 'x' }, 'customer.name'],
  ])('%s: 400 naming the field, nothing stored', async (_what, body, field) => {
    await expectRefused(() => pay(JSON.stringify(body)), { status: 400, type: invalid, field });
  });

  it.each([
    ['an array', '[1]'],
    ['null', 'null'],
    ['a string', '"pay me"'],
    ['a number', '1250'],
  ])('a body that is %s: 400 naming the body', async (_what, body) => {
    await expectRefused(() => pay(body), { status: 400, type: invalid, field: 'body' });
  });
});

describe('POST /v1/payments: strings without control characters', () => {
  it.each([
    ['NUL (was a 500 and a key stuck pending for 30 days)', 'a\u0000b'],
    ['BEL', 'a\u0007b'],
    ['a line break', 'alice\nbob'],
    ['DEL', 'a\u007fb'],
    ['a C1 control', 'a\u0085b'],
    ['an unpaired surrogate', 'a\ud800b'],
  ])('customer with %s: 400, nothing stored, no key left pending', async (_what, customer) => {
    await expectRefused(() => pay(JSON.stringify({ ...valid, customer })), {
      status: 400,
      type: invalid,
      field: 'customer',
    });
  });

  it('the same NUL, retried with the same key: the same 400 every time, never a stuck key', async () => {
    const key = `nul-${randomUUID()}`;
    const body = JSON.stringify({ ...valid, customer: 'a\u0000b' });
    for (let i = 0; i < 3; i++) {
      await expectRefused(() => pay(body, [`Idempotency-Key: ${key}`]), {
        status: 400,
        type: invalid,
        field: 'customer',
      });
    }
    // The key is still free: the corrected request runs.
    const fixed = await pay(JSON.stringify(valid), [`Idempotency-Key: ${key}`]);
    expect(fixed.status).toBe(201);
    expect((await h.counts()).pending).toBe(0);
  });
});

describe('POST /v1/payments: bodies Fastify or idem refuse', () => {
  it('JSON that does not parse, a prototype-poisoning key, an empty body: 400, nothing stored', async () => {
    for (const body of [
      '{"amount":',
      `{"__proto__":{"admin":true},"amount":1,"currency":"eur","customer":"a"}`,
      '',
    ]) {
      const before = await h.counts();
      const problem = expectProblem(await pay(body), 400);
      expect(problem.type).toBe('urn:idem:problem:body-malformed');
      expect(await h.counts()).toEqual(before);
    }
  });

  it("a body over the demo's 64 KiB: 413 declared or streamed (idem does not raise the limit)", async () => {
    const big = JSON.stringify({ ...valid, customer: 'c'.repeat(70 * 1024) });
    await expectRefused(() => pay(big), { status: 413, type: 'urn:idem:problem:body-too-large' });
    const chunk = Buffer.from(big);
    const chunked = Buffer.concat([
      Buffer.from(`${chunk.length.toString(16)}\r\n`),
      chunk,
      Buffer.from('\r\n0\r\n\r\n'),
    ]);
    await expectRefused(() => pay(chunked, ['Transfer-Encoding: chunked']), {
      status: 413,
      type: 'urn:idem:problem:body-too-large',
    });
  });

  it('a media type without a parser: 415, nothing stored', async () => {
    await expectRefused(
      () => pay(JSON.stringify(valid), ['Content-Type: application/x-www-form-urlencoded']),
      {
        status: 415,
        type: 'urn:idem:problem:media-type-unsupported',
      },
    );
  });
});

describe('repeated security headers', () => {
  it('two Authorization lines (tenant A, then tenant B): 400, whichever a proxy would keep', async () => {
    for (const lines of [
      ['Authorization: Bearer sk_test_tenant_a', 'Authorization: Bearer sk_test_tenant_b'],
      ['Authorization: Bearer sk_test_acme', 'Authorization: '],
      ['Authorization: ', 'Authorization: Bearer sk_test_acme'],
    ]) {
      await expectRefused(() => pay(JSON.stringify(valid), lines), {
        status: 400,
        type: invalid,
        field: 'Authorization',
      });
      await expectRefused(() => get('/v1/payments', lines), {
        status: 400,
        type: invalid,
        field: 'Authorization',
      });
    }
  });

  it('two Idempotency-Key lines, an empty second one too: 400 key-multiple', async () => {
    for (const lines of [
      ['Idempotency-Key: order-1', 'Idempotency-Key: order-2'],
      ['Idempotency-Key: order-1', 'Idempotency-Key: '],
      ['Idempotency-Key: ', 'Idempotency-Key: order-1'],
    ]) {
      await expectRefused(() => pay(JSON.stringify(valid), lines), {
        status: 400,
        type: 'urn:idem:problem:key-multiple',
      });
    }
  });

  it('no usable Authorization: 401 before anything else', async () => {
    await expectRefused(() => pay(JSON.stringify(valid), ['Authorization: Bearer sk_live_acme']), {
      status: 401,
      type: 'urn:idem-demo:unauthorized',
    });
  });
});

describe('a retry that changes what the handler sees', () => {
  it('is a 422 and changes nothing', async () => {
    const key = `retry-${randomUUID()}`;
    expect((await pay(JSON.stringify(valid), [`Idempotency-Key: ${key}`])).status).toBe(201);
    for (const changed of [
      { ...valid, amount: 1251 },
      { ...valid, customer: 'bob' },
      { ...valid, currency: 'usd' },
    ]) {
      await expectRefused(() => pay(JSON.stringify(changed), [`Idempotency-Key: ${key}`]), {
        status: 422,
        type: 'urn:idem:problem:key-reused',
      });
    }
    // Whitespace and key order are the same request: replayed.
    const replay = await pay(`{ "customer":"alice", "currency":"eur", "amount":1250 }`, [
      `Idempotency-Key: ${key}`,
    ]);
    expect(replay.status).toBe(201);
    expect(replay.headers['idempotent-replayed']?.[0]).toBe('true');
  });
});

describe('GET inputs', () => {
  it.each([
    ['/v1/payments?customer=%00', 'customer'],
    ['/v1/payments?customer=a%00b', 'customer'],
    ['/v1/payments?customer=a%0Ab', 'customer'],
    ['/v1/payments?customer=a&customer=b', 'customer'],
    ['/v1/payments?customer=' + 'c'.repeat(65), 'customer'],
    ['/v1/payments?limit=10', 'limit'],
    ['/v1/ledger?customer=%00', 'customer'],
    ['/v1/ledger?cursor=x', 'cursor'],
    ['/v1/payments/pay_%00', 'id'],
    ['/v1/payments/%00', 'id'],
    ['/v1/payments/pay_abc%22%3B', 'id'],
    [`/v1/payments/pay_${'x'.repeat(70)}`, 'id'],
    ['/v1/payments/%ZZ', 'url'],
  ])('%s: 400 naming %s (was a 500 with a stack trace for NUL)', async (path, field) => {
    const problem = await expectRefused(() => get(path), { status: 400, type: invalid, field });
    expect(JSON.stringify(problem)).not.toMatch(/22021|invalid byte sequence|syntax/i);
  });

  it('a path segment over 100 characters: 414, not 404 or 500', async () => {
    await expectRefused(() => get(`/v1/payments/pay_${'x'.repeat(100)}`), {
      status: 414,
      type: invalid,
      field: 'url',
    });
  });

  it('a well-formed id that does not exist is a 404, and the lists answer', async () => {
    const missing = await get('/v1/payments/pay_doesNotExist');
    expect(expectProblem(missing, 404).type).toBe('urn:idem-demo:not-found');
    const list = await get('/v1/payments?customer=alice');
    expectNoLeak(list);
    expect(list.status).toBe(200);
  });
});

describe('afterwards', () => {
  it('no key was ever left pending', async () => {
    expect((await h.counts()).pending).toBe(0);
  });
});
