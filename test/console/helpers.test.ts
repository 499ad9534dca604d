/** The console's pure pieces: loopback detection, access decisions, body previews, redaction, filters. */
import { describe, expect, it } from 'vitest';
import { decideAccess, hostName, isLoopback, sessionValue } from '../../src/console/access.js';
import { escapeHtml } from '../../src/console/assets.js';
import { decodeCursor, duration, encodeCursor } from '../../src/console/params.js';
import { hexLimit, previewBytes, previewText, textLimit } from '../../src/console/preview.js';
import { redactHeaders, safeUrl } from '../../src/console/redact.js';

describe('console helpers', () => {
  it('knows loopback addresses and names', () => {
    for (const host of [
      '127.0.0.1',
      '127.1.2.3',
      '::1',
      '[::1]',
      '::ffff:127.0.0.1',
      'localhost',
      'LOCALHOST',
      'app.localhost',
    ]) {
      expect(isLoopback(host), host).toBe(true);
    }
    for (const host of [
      '0.0.0.0',
      '::',
      '192.0.2.2',
      'fd00::2',
      'example.com',
      'localhost.example.com',
      '127.0.0.1.nip.io',
      '',
    ]) {
      expect(isLoopback(host), host).toBe(false);
    }
    expect(hostName('LocalHost:4000')).toBe('localhost');
    expect(hostName('[::1]:4000')).toBe('[::1]');
    expect(hostName(undefined)).toBeNull();
  });

  it('decides access from the bind address, the token and the Host header', () => {
    const token = 'x'.repeat(24);
    const base = { token: undefined, authorization: undefined, cookie: undefined, queryToken: undefined };
    expect(decideAccess({ ...base, boundTo: '127.0.0.1', hostHeader: '127.0.0.1:4000' })).toEqual({
      allow: true,
      setCookie: false,
    });
    expect(decideAccess({ ...base, boundTo: '127.0.0.1', hostHeader: 'evil.example:4000' })).toMatchObject({
      allow: false,
      status: 403,
    });
    expect(decideAccess({ ...base, boundTo: '0.0.0.0', hostHeader: '127.0.0.1:4000' })).toMatchObject({
      allow: false,
      status: 403,
    });
    const exposed = { ...base, boundTo: '::', token, hostHeader: 'localhost:4000' };
    expect(decideAccess(exposed)).toMatchObject({ allow: false, status: 401 });
    expect(decideAccess({ ...exposed, authorization: `Bearer ${token}` })).toEqual({
      allow: true,
      setCookie: false,
    });
    expect(decideAccess({ ...exposed, authorization: `bearer   ${token} ` })).toEqual({
      allow: true,
      setCookie: false,
    });
    expect(decideAccess({ ...exposed, queryToken: token })).toEqual({ allow: true, setCookie: true });
    expect(decideAccess({ ...exposed, cookie: `a=b; idem_console=${sessionValue(token)}` })).toEqual({
      allow: true,
      setCookie: false,
    });
    expect(decideAccess({ ...exposed, cookie: `idem_console=${token}` })).toMatchObject({ allow: false });
    expect(sessionValue(token)).not.toContain(token);
  });

  it('previews UTF-8 as text, JSON pretty-printed, binary as a bounded hex dump', () => {
    const json = previewBytes(new TextEncoder().encode('{"a":[1,2]}'))!;
    expect(json).toEqual({
      bytes: 11,
      encoding: 'utf8',
      text: '{"a":[1,2]}',
      json: '{\n  "a": [\n    1,\n    2\n  ]\n}',
      truncated: false,
    });
    expect(previewBytes(new TextEncoder().encode('héllo ✓'))).toMatchObject({
      encoding: 'utf8',
      text: 'héllo ✓',
      bytes: 10,
    });
    expect(previewBytes(new Uint8Array([0xc3, 0x28]))).toMatchObject({
      encoding: 'hex',
      text: expect.stringContaining('c3 28') as string,
    });
    expect(previewBytes(new TextEncoder().encode('a\u0000b'))).toMatchObject({ encoding: 'hex' });
    expect(previewBytes(null)).toBeNull();
    const big = previewBytes(new Uint8Array(textLimit + 10).fill(0x61))!;
    expect(big).toMatchObject({ encoding: 'utf8', truncated: true, bytes: textLimit + 10 });
    expect(big.text).toHaveLength(textLimit);
    // A multi-byte character cut at the limit is not a reason to call the body binary.
    const cut = new Uint8Array(textLimit + 3).fill(0x61);
    cut.set([0xe2, 0x9c, 0x93], textLimit - 1);
    expect(previewBytes(cut)).toMatchObject({ encoding: 'utf8', truncated: true });
    const binary = previewBytes(new Uint8Array(hexLimit * 2).fill(0xff))!;
    expect(binary).toMatchObject({ encoding: 'hex', truncated: true });
    expect(binary.text.split('\n')).toHaveLength(hexLimit / 16);
    expect(previewText('not json {')).toEqual({
      bytes: 10,
      encoding: 'utf8',
      text: 'not json {',
      truncated: false,
    });
  });

  it('redacts headers that can carry credentials and strips URL queries', () => {
    expect(
      redactHeaders({
        Authorization: 'Bearer a',
        'Set-Cookie': 's=1',
        'Stripe-Signature': 't=1,v1=x',
        'X-Hub-Signature-256': 'sha256=x',
        'webhook-signature': 'v1,x',
        'X-Api-Key': 'k',
        'x-session-id': 's',
        'content-type': 'application/json',
        'x-count': 3,
      }),
    ).toEqual([
      ['Authorization', '[redacted]'],
      ['Set-Cookie', '[redacted]'],
      ['Stripe-Signature', '[redacted]'],
      ['X-Hub-Signature-256', '[redacted]'],
      ['webhook-signature', '[redacted]'],
      ['X-Api-Key', '[redacted]'],
      ['x-session-id', '[redacted]'],
      ['content-type', 'application/json'],
      ['x-count', '3'],
    ]);
    expect(redactHeaders([['cookie', 'a=b'], ['accept', '*/*'], 'junk'])).toEqual([
      ['cookie', '[redacted]'],
      ['accept', '*/*'],
    ]);
    expect(safeUrl('https://user:pw@hooks.example.com/in/abc?token=secret#x')).toBe(
      'https://hooks.example.com/in/abc?…',
    );
  });

  it('parses durations and round-trips the keyset cursor', () => {
    expect(duration({ d: '90s' }, 'd')).toBe(90_000);
    expect(duration({ d: '15m' }, 'd')).toBe(900_000);
    expect(duration({ d: '7d' }, 'd')).toBe(604_800_000);
    expect(duration({ d: '30' }, 'd')).toBe(30_000);
    expect(duration({}, 'd')).toBeUndefined();
    expect(() => duration({ d: '-1m' }, 'd')).toThrow(/duration/);
    const cursor = {
      createdAt: '2030-01-01 00:00:00.123456+00',
      tenant: 'a',
      operation: 'POST /x',
      key: 'k,"]',
    };
    expect(decodeCursor({ cursor: encodeCursor(cursor) })).toEqual(cursor);
    expect(() => decodeCursor({ cursor: encodeCursor({ ...cursor, createdAt: "now'; --" }) })).toThrow(
      /cursor/,
    );
  });

  it('escapes what goes into the page template', () => {
    expect(escapeHtml(`"><script>x</script>'&`)).toBe(
      '&#34;&#62;&#60;script&#62;x&#60;/script&#62;&#39;&#38;',
    );
  });
});
