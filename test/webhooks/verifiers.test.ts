/**
 * Every verifier against signatures made the sender's way (Standard Webhooks v1 by the
 * `standardwebhooks` npm package): acceptance, rotation, tolerance both ways, malformed headers,
 * and exact bytes.
 */
import { createHmac } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { Webhook as SvixWebhook } from 'svix';
import { describe, expect, it } from 'vitest';
import {
  createGithubVerifier,
  createHmacVerifier,
  isWebhookMalformed,
  isWebhookUnauthorized,
  recordHeaders,
  createStandardWebhooksVerifier,
  createStripeVerifier,
  type WebhookVerifier,
} from '../../src/webhooks/index.js';
import {
  ed25519Pair,
  githubSecret,
  hmacSecret,
  signGeneric,
  signGithub,
  signStandard,
  signStandardV1a,
  signStripe,
  standardSecret,
  standardSecretNext,
  stripeSecret,
  type SignedRequest,
} from './support.js';

const now = Date.UTC(2030, 0, 1, 12);
const minute = 60_000;

function verify(verifier: WebhookVerifier, request: SignedRequest, at = now) {
  return verifier.verify({ headers: recordHeaders(request.headers), body: request.body }, at);
}

function failure(fn: () => unknown): { status: number; reason?: string; message: string } {
  try {
    fn();
  } catch (error) {
    if (isWebhookUnauthorized(error)) return { status: 401, reason: error.reason, message: error.message };
    if (isWebhookMalformed(error)) return { status: 400, message: error.message };
    throw error;
  }
  throw new Error('expected the verifier to refuse');
}

const genericOptions = {
  secrets: [hmacSecret],
  header: 'X-Signature',
  algorithm: 'sha512',
  encoding: 'base64' as const,
  prefix: 'sha512=',
  deliveryIdHeader: 'X-Delivery-Id',
  eventTypeHeader: 'X-Event-Type',
  timestamp: { header: 'X-Timestamp' },
};

describe('Standard Webhooks verifier', () => {
  const verifier = createStandardWebhooksVerifier({ secrets: [standardSecret] });
  const body = JSON.stringify({ type: 'invoice.paid', data: { id: 'in_1' } });

  it('accepts a v1 signature made by the standardwebhooks package, with id and type', () => {
    const delivery = verify(verifier, signStandard({ id: 'msg_1', body, timestampMs: now }));
    expect(delivery).toEqual({
      deliveryId: 'msg_1',
      eventType: 'invoice.paid',
      signedAt: now - (now % 1000),
    });
  });

  it('refuses a changed body, a changed id and another secret', () => {
    const signed = signStandard({ id: 'msg_1', body, timestampMs: now });
    expect(failure(() => verify(verifier, { ...signed, body: Buffer.from(body + ' ') })).reason).toBe(
      'signature-mismatch',
    );
    expect(
      failure(() => verify(verifier, { ...signed, headers: { ...signed.headers, 'webhook-id': 'msg_2' } }))
        .reason,
    ).toBe('signature-mismatch');
    const other = signStandard({ id: 'msg_1', body, timestampMs: now, secret: standardSecretNext });
    expect(failure(() => verify(verifier, other)).reason).toBe('signature-mismatch');
  });

  it('rotation: accepts either secret while both are configured, and a header carrying both signatures', () => {
    const rotating = createStandardWebhooksVerifier({ secrets: [standardSecret, standardSecretNext] });
    expect(verify(rotating, signStandard({ id: 'a', body, timestampMs: now })).deliveryId).toBe('a');
    expect(
      verify(rotating, signStandard({ id: 'b', body, timestampMs: now, secret: standardSecretNext }))
        .deliveryId,
    ).toBe('b');
    // The sender signs with old and new; a receiver that only knows the new one accepts too.
    const next = new Webhook(standardSecretNext).sign('c', new Date(now), body);
    const both = signStandard({ id: 'c', body, timestampMs: now, extraSignatures: [next] });
    expect(verify(createStandardWebhooksVerifier({ secrets: [standardSecretNext] }), both).deliveryId).toBe(
      'c',
    );
  });

  it('applies the tolerance to the past and to the future', () => {
    const signed = (offset: number) => signStandard({ id: 'msg_t', body, timestampMs: now + offset });
    expect(verify(verifier, signed(-5 * minute + 1000)).deliveryId).toBe('msg_t');
    expect(verify(verifier, signed(5 * minute - 1000)).deliveryId).toBe('msg_t');
    expect(failure(() => verify(verifier, signed(-5 * minute - 1000))).reason).toBe('timestamp-too-old');
    expect(failure(() => verify(verifier, signed(5 * minute + 1000))).reason).toBe('timestamp-too-new');
    const narrow = createStandardWebhooksVerifier({
      secrets: [standardSecret],
      toleranceSeconds: 600,
      futureToleranceSeconds: 10,
    });
    expect(verify(narrow, signed(-9 * minute)).deliveryId).toBe('msg_t');
    expect(failure(() => verify(narrow, signed(60_000))).reason).toBe('timestamp-too-new');
  });

  it('missing signature is 401; missing or malformed id and timestamp are 400', () => {
    const signed = signStandard({ id: 'msg_1', body, timestampMs: now });
    const without = (name: string) => {
      const headers = { ...signed.headers };
      delete headers[name];
      return { ...signed, headers };
    };
    expect(failure(() => verify(verifier, without('webhook-signature')))).toMatchObject({
      status: 401,
      reason: 'signature-missing',
    });
    expect(failure(() => verify(verifier, without('webhook-id'))).status).toBe(400);
    expect(failure(() => verify(verifier, without('webhook-timestamp'))).status).toBe(400);
    expect(
      failure(() =>
        verify(verifier, { ...signed, headers: { ...signed.headers, 'webhook-timestamp': '17e8' } }),
      ).status,
    ).toBe(400);
    // An id with '.' could shift the boundaries of `${id}.${timestamp}.${body}`: refused.
    expect(
      failure(() => verify(verifier, signStandard({ id: 'msg.1', body, timestampMs: now }))).status,
    ).toBe(400);
    expect(
      failure(() =>
        verify(verifier, { ...signed, headers: { ...signed.headers, 'webhook-signature': 'v2,abc' } }),
      ).reason,
    ).toBe('signature-unsupported');
  });

  it('v1a: verifies ed25519 over bytes that are not valid UTF-8, which the npm package cannot', () => {
    const { privateKey, publicKey } = ed25519Pair();
    const asymmetric = createStandardWebhooksVerifier({ publicKeys: [publicKey] });
    const binary = Uint8Array.from([0xff, 0xfe, 0x00, 0x80, 0xc3, 0x28]);
    const signed = signStandardV1a({ id: 'msg_bin', body: binary, privateKey, timestampMs: now });
    expect(verify(asymmetric, signed)).toMatchObject({ deliveryId: 'msg_bin', eventType: null });
    const tampered = Uint8Array.from(binary);
    tampered[0] = 0xfe;
    expect(failure(() => verify(asymmetric, { ...signed, body: tampered })).reason).toBe(
      'signature-mismatch',
    );
    // A v1-only verifier sees no signature it supports.
    expect(failure(() => verify(verifier, signed)).reason).toBe('signature-unsupported');
  });

  it('v1 over non-UTF-8 bytes: ours verifies the exact bytes; the npm package rejects the authentic request', () => {
    const binary = Buffer.from([0x7b, 0xff, 0xfe, 0x7d]);
    const ts = Math.floor(now / 1000);
    const key = Buffer.from(standardSecret.slice(6), 'base64');
    const mac = createHmac('sha256', key)
      .update(Buffer.concat([Buffer.from(`msg_b.${ts}.`), binary]))
      .digest('base64');
    const headers = {
      'webhook-id': 'msg_b',
      'webhook-timestamp': String(ts),
      'webhook-signature': `v1,${mac}`,
    };
    expect(verify(verifier, { headers, body: binary }).deliveryId).toBe('msg_b');
    // The package reads Date.now(); give it a current timestamp and the same bytes, signed the same way.
    const nowTs = Math.floor(Date.now() / 1000);
    const macNow = createHmac('sha256', key)
      .update(Buffer.concat([Buffer.from(`msg_b.${nowTs}.`), binary]))
      .digest('base64');
    expect(() =>
      new Webhook(standardSecret).verify(binary, {
        'webhook-id': 'msg_b',
        'webhook-timestamp': String(nowTs),
        'webhook-signature': `v1,${macNow}`,
      }),
    ).toThrow(/No matching signature/);
  });
});

describe('Svix headers (svix-id, svix-timestamp, svix-signature)', () => {
  const verifier = createStandardWebhooksVerifier({ secrets: [standardSecret] });
  const body = JSON.stringify({ type: 'invoice.paid', data: { id: 'in_1' } });
  /** Signed by the svix package, sent with the header names Svix uses. */
  const svixSigned = (id: string, at = now) => ({
    headers: {
      'content-type': 'application/json',
      'svix-id': id,
      'svix-timestamp': String(Math.floor(at / 1000)),
      'svix-signature': new SvixWebhook(standardSecret).sign(id, new Date(at), body),
    },
    body: Buffer.from(body),
  });

  it('accepts a delivery signed by the svix package, with the same id, type and tolerance', () => {
    expect(verify(verifier, svixSigned('msg_svix_1'))).toEqual({
      deliveryId: 'msg_svix_1',
      eventType: 'invoice.paid',
      signedAt: now - (now % 1000),
    });
    expect(failure(() => verify(verifier, svixSigned('msg_svix_2', now - 6 * minute))).reason).toBe(
      'timestamp-too-old',
    );
    const signed = svixSigned('msg_svix_3');
    expect(failure(() => verify(verifier, { ...signed, body: Buffer.from(body + ' ') })).reason).toBe(
      'signature-mismatch',
    );
    const { 'svix-signature': _signature, ...unsigned } = signed.headers;
    expect(failure(() => verify(verifier, { ...signed, headers: unsigned })).reason).toBe(
      'signature-missing',
    );
  });

  it('refuses a delivery that mixes webhook-* and svix-* headers, whichever set the signature covers', () => {
    const svix = svixSigned('msg_mix');
    const standard = signStandard({ id: 'msg_mix', body, timestampMs: now });
    const mixes = [
      { ...svix.headers, 'webhook-id': 'msg_other' },
      { ...standard.headers, 'svix-id': 'msg_mix' },
      { ...standard.headers, 'svix-signature': svix.headers['svix-signature'] },
      { ...svix.headers, ...standard.headers },
    ];
    for (const headers of mixes) {
      const refused = failure(() => verify(verifier, { headers, body: svix.body }));
      expect(refused).toMatchObject({ status: 400 });
      expect(refused.message).toMatch(/mixes webhook-\* and svix-\* headers/);
    }
  });

  it('what the standardwebhooks package signs verifies with the svix package, and the other way round', () => {
    const standard = signStandard({ id: 'msg_x', body, timestampMs: Date.now() });
    expect(() => new SvixWebhook(standardSecret).verify(body, standard.headers)).not.toThrow();
    const svix = svixSigned('msg_y', Date.now());
    const asStandard = {
      'webhook-id': svix.headers['svix-id'],
      'webhook-timestamp': svix.headers['svix-timestamp'],
      'webhook-signature': svix.headers['svix-signature'],
    };
    expect(new Webhook(standardSecret).verify(body, asStandard)).toEqual(JSON.parse(body));
  });

  it('the svix signature header is never stored; the id and timestamp are', () => {
    expect(verifier.signatureHeaders).toContain('svix-signature');
    expect(verifier.storedHeaders).toEqual(expect.arrayContaining(['svix-id', 'svix-timestamp']));
    expect(verifier.storedHeaders).not.toContain('svix-signature');
  });
});

describe('GitHub verifier', () => {
  const verifier = createGithubVerifier({ secrets: [githubSecret] });
  const request = () =>
    signGithub({
      delivery: '72d3162e-cc78-11e3-81ab-4c9367dc0958',
      hookId: '123',
      event: 'push',
      body: '{"ref":"main"}',
    });

  it('accepts X-Hub-Signature-256 and keys the delivery by hook id and delivery GUID', () => {
    expect(verify(verifier, request())).toEqual({
      deliveryId: '123:72d3162e-cc78-11e3-81ab-4c9367dc0958',
      eventType: 'push',
      signedAt: null,
    });
  });

  it('matches the example in GitHub’s documentation', () => {
    // docs.github.com "Validating webhook deliveries": secret "It's a Secret to Everybody", payload "Hello, World!".
    const signed = {
      headers: {
        'x-hub-signature-256': 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17',
        'x-github-delivery': 'd1',
        'x-github-hook-id': '1',
      },
      body: Buffer.from('Hello, World!'),
    };
    expect(verify(createGithubVerifier({ secrets: ["It's a Secret to Everybody"] }), signed).deliveryId).toBe(
      '1:d1',
    );
  });

  it('rotation, mismatch, and malformed headers', () => {
    const rotating = createGithubVerifier({ secrets: ['old-secret', githubSecret] });
    expect(verify(rotating, request()).deliveryId).toContain('123:');
    expect(failure(() => verify(createGithubVerifier({ secrets: ['other'] }), request())).reason).toBe(
      'signature-mismatch',
    );
    const r = request();
    expect(
      failure(() => verify(verifier, { ...r, headers: { ...r.headers, 'x-hub-signature-256': 'sha1=abc' } }))
        .status,
    ).toBe(400);
    expect(
      failure(() => verify(verifier, { ...r, headers: { ...r.headers, 'x-hub-signature-256': 'sha256=zz' } }))
        .status,
    ).toBe(400);
    expect(
      failure(() => verify(verifier, { ...r, headers: { ...r.headers, 'x-github-hook-id': 'abc' } })).status,
    ).toBe(400);
    const { 'x-github-delivery': _d, ...noDelivery } = r.headers;
    expect(failure(() => verify(verifier, { ...r, headers: noDelivery })).status).toBe(400);
    const { 'x-hub-signature-256': _s, ...noSignature } = r.headers;
    expect(failure(() => verify(verifier, { ...r, headers: noSignature })).reason).toBe('signature-missing');
  });
});

describe('Stripe verifier', () => {
  const verifier = createStripeVerifier({ secrets: [stripeSecret] });
  const body = JSON.stringify({ id: 'evt_1', type: 'invoice.paid', created: 1 });

  it('accepts t= and v1=, taking the event id from the verified body', () => {
    expect(verify(verifier, signStripe({ body, timestampMs: now }))).toEqual({
      deliveryId: 'evt_1',
      eventType: 'invoice.paid',
      signedAt: now - (now % 1000),
    });
  });

  it('rotation: one v1 per secret while rolling; any configured secret matches', () => {
    const rolling = signStripe({ body, timestampMs: now, secrets: ['whsec_old', stripeSecret] });
    expect(verify(verifier, rolling).deliveryId).toBe('evt_1');
    expect(
      verify(
        createStripeVerifier({ secrets: ['whsec_old', 'whsec_new'] }),
        signStripe({ body, timestampMs: now, secrets: ['whsec_new'] }),
      ).deliveryId,
    ).toBe('evt_1');
  });

  it('tolerance both ways; malformed header 400; missing or wrong signature 401', () => {
    expect(failure(() => verify(verifier, signStripe({ body, timestampMs: now - 6 * minute }))).reason).toBe(
      'timestamp-too-old',
    );
    expect(failure(() => verify(verifier, signStripe({ body, timestampMs: now + 6 * minute }))).reason).toBe(
      'timestamp-too-new',
    );
    const signed = signStripe({ body, timestampMs: now });
    const withHeader = (value: string) => ({
      ...signed,
      headers: { ...signed.headers, 'stripe-signature': value },
    });
    expect(failure(() => verify(verifier, withHeader('v1=abc'))).status).toBe(400);
    expect(failure(() => verify(verifier, withHeader('garbage'))).status).toBe(400);
    expect(failure(() => verify(verifier, withHeader(`t=${Math.floor(now / 1000)}`))).reason).toBe(
      'signature-unsupported',
    );
    expect(failure(() => verify(verifier, withHeader(`t=${Math.floor(now / 1000)},v1=00`))).reason).toBe(
      'signature-mismatch',
    );
    expect(failure(() => verify(verifier, { ...signed, headers: {} })).reason).toBe('signature-missing');
  });

  it('an authentic body without an event id is malformed', () => {
    expect(
      failure(() => verify(verifier, signStripe({ body: '{"type":"x"}', timestampMs: now }))).status,
    ).toBe(400);
  });
});

describe('generic HMAC verifier', () => {
  const verifier = createHmacVerifier(genericOptions);
  const body = '{"n":1}';

  it('configurable header, algorithm, encoding, prefix, id and type headers, signed timestamp', () => {
    expect(verify(verifier, signGeneric({ id: 'd-1', body, timestampMs: now, event: 'thing.made' }))).toEqual(
      {
        deliveryId: 'd-1',
        eventType: 'thing.made',
        signedAt: now - (now % 1000),
      },
    );
  });

  it('rotation, tolerance both ways, wrong prefix and encoding', () => {
    const rotating = createHmacVerifier({ ...genericOptions, secrets: ['old', hmacSecret] });
    expect(verify(rotating, signGeneric({ id: 'd-2', body, timestampMs: now })).deliveryId).toBe('d-2');
    expect(
      failure(() => verify(verifier, signGeneric({ id: 'd', body, timestampMs: now, secret: 'x' }))).reason,
    ).toBe('signature-mismatch');
    expect(
      failure(() => verify(verifier, signGeneric({ id: 'd', body, timestampMs: now - 10 * minute }))).reason,
    ).toBe('timestamp-too-old');
    expect(
      failure(() => verify(verifier, signGeneric({ id: 'd', body, timestampMs: now + 10 * minute }))).reason,
    ).toBe('timestamp-too-new');
    const signed = signGeneric({ id: 'd', body, timestampMs: now });
    expect(
      failure(() => verify(verifier, { ...signed, headers: { ...signed.headers, 'x-signature': 'md5=abc' } }))
        .status,
    ).toBe(400);
    expect(
      failure(() =>
        verify(verifier, { ...signed, headers: { ...signed.headers, 'x-signature': 'sha512=@@' } }),
      ).status,
    ).toBe(400);
  });

  it('hex, body-only signing with several signatures in the header', () => {
    const simple = createHmacVerifier({
      secrets: ['k'],
      header: 'x-sig',
      separator: ',',
      deliveryIdHeader: 'x-id',
    });
    const mac = createHmac('sha256', 'k').update(body).digest('hex').toUpperCase();
    const request = { headers: { 'x-sig': `deadbeef,${mac}`, 'x-id': 'i-1' }, body: Buffer.from(body) };
    expect(verify(simple, request)).toEqual({ deliveryId: 'i-1', eventType: null, signedAt: null });
  });
});

describe('errors carry no header value', () => {
  it('messages name headers, never their values', () => {
    const verifier = createStandardWebhooksVerifier({ secrets: [standardSecret] });
    const signed = signStandard({ id: 'msg_x', body: '{}', timestampMs: now });
    const sig = signed.headers['webhook-signature']!;
    const bad = { ...signed, headers: { ...signed.headers, 'webhook-timestamp': 'SECRET-LOOKING-VALUE' } };
    const message = failure(() => verify(verifier, bad)).message;
    expect(message).not.toContain('SECRET-LOOKING-VALUE');
    expect(message).not.toContain(sig);
  });
});
