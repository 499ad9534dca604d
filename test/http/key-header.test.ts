import { describe, expect, it } from 'vitest';
import { parseIdempotencyKey, requestFingerprint } from 'idem/http';

describe('Idempotency-Key header parsing (draft-ietf-httpapi-idempotency-key-header, RFC 8941)', () => {
  it.each([
    ['"8e03978e-40d5-43e8-bc93-6894a57f9324"', '8e03978e-40d5-43e8-bc93-6894a57f9324'],
    ['  "padded"\t', 'padded'],
    ['"with\\"quote"', 'with"quote'],
    ['"back\\\\slash"', 'back\\slash'],
    ['"k";a=1;b="x;y";c=?1;d=tok/en;e=:aGk=:;f=-1.5', 'k'],
    ['8e03978e-40d5-43e8-bc93-6894a57f9324', '8e03978e-40d5-43e8-bc93-6894a57f9324'],
    ['base64+/key==', 'base64+/key=='],
    ['x'.repeat(255), 'x'.repeat(255)],
  ])('accepts %j', (field, key) => {
    expect(parseIdempotencyKey([field])).toEqual({ ok: true, key });
  });

  it.each([
    [[], 'missing'],
    [[''], 'missing'],
    [['   '], 'missing'],
    [['""'], 'malformed'],
    [['"open'], 'malformed'],
    [['"bad\\n"'], 'malformed'],
    [['"has space"'], 'malformed'],
    [['"tab\there"'], 'malformed'],
    [['"é"'], 'malformed'],
    [['"k";A=1'], 'malformed'],
    [['"k";a=@'], 'malformed'],
    [['"k" trailing'], 'malformed'],
    [['has space'], 'malformed'],
    [['semi;colon'], 'malformed'],
    [['a"b'], 'malformed'],
    [['x'.repeat(256)], 'too-long'],
    [[`"${'y'.repeat(256)}"`], 'too-long'],
    [['"a"', '"b"'], 'multiple'],
    [['a', 'a'], 'multiple'],
    [['a', ''], 'multiple'],
    [['', 'a'], 'multiple'],
    [['', ' '], 'multiple'],
    [['"a", "b"'], 'multiple'],
    [['a, b'], 'multiple'],
    [['"a";p=1, "b"'], 'multiple'],
  ])('refuses %j as %s', (fields, reason) => {
    const result = parseIdempotencyKey(fields);
    expect(result).toMatchObject({ ok: false, reason });
  });
});

describe('request fingerprint', () => {
  const base = { method: 'POST', route: '/orders', path: '/orders', query: '' };

  it('ignores whitespace and key order of a JSON body, and excluded fields', () => {
    const a = requestFingerprint({ ...base, body: { a: 1, b: { c: [1, 2] }, at: 't1' } }, ['at'], true);
    const b = requestFingerprint(
      { ...base, body: JSON.parse('{ "b": {"c":[1, 2.0]}, "a": 1.0, "at": "t2" }') },
      ['at'],
      true,
    );
    expect(a).toBe(b);
    expect(requestFingerprint({ ...base, body: { a: 2, b: { c: [1, 2] } } }, ['at'], true)).not.toBe(a);
  });

  it('covers method, route, path and query (in any order), not only the body', () => {
    const f = (over: object) => requestFingerprint({ ...base, body: { a: 1 }, ...over }, [], true);
    const all = [
      f({}),
      f({ method: 'PATCH' }),
      f({ route: '/orders/:id' }),
      f({ path: '/orders/2' }),
      f({ query: 'x=1' }),
    ];
    expect(new Set(all).size).toBe(all.length);
    expect(f({ query: 'a=1&b=2' })).toBe(f({ query: 'b=2&a=1' }));
    expect(requestFingerprint({ ...base, query: 'x=1', body: 1 }, [], false)).toBe(
      requestFingerprint({ ...base, query: '', body: 1 }, [], false),
    );
  });

  it('tells a text body from a JSON string and hashes binary bodies by their bytes', () => {
    const text = requestFingerprint({ ...base, body: 'hello' }, [], true);
    const json = requestFingerprint({ ...base, body: { text: 'hello' } }, [], true);
    expect(text).not.toBe(json);
    const bytes = requestFingerprint({ ...base, body: Buffer.from([1, 2, 3]) }, [], true);
    expect(requestFingerprint({ ...base, body: new Uint8Array([1, 2, 3]) }, [], true)).toBe(bytes);
    expect(requestFingerprint({ ...base, body: Buffer.from([1, 2, 4]) }, [], true)).not.toBe(bytes);
  });
});
