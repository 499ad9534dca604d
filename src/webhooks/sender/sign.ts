/**
 * Standard Webhooks signing: `v1` (HMAC-SHA256 with a `whsec_` secret) and `v1a` (ed25519 with a
 * `whsk_` secret key) over `${id}.${timestamp}.${body}`; several secrets give several
 * space-separated signatures, so an endpoint's secret rotates without downtime.
 */
import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  randomBytes,
  sign,
  type KeyObject,
} from 'node:crypto';
import { InvalidArgumentError } from '../../core/errors.js';
import { hmac } from '../verify/common.js';
import { decodeStandardSecret } from '../verify/standard-webhooks.js';

/** DER prefix of an ed25519 PKCS#8 private key; the 32-byte seed follows it. */
const ed25519Pkcs8Prefix = Buffer.from('302e020100300506032b657004220420', 'hex');

/** A signing secret, parsed once. */
export type SigningKey = { kind: 'v1'; key: Uint8Array } | { kind: 'v1a'; key: KeyObject };

/** Parses `whsec_…` (v1) or `whsk_…` (v1a: base64 of the 32-byte ed25519 seed, or of seed‖public key). */
export function parseSigningSecret(secret: string): SigningKey {
  if (secret.startsWith('whsk_')) {
    const raw = Buffer.from(secret.slice(5), 'base64');
    if (raw.length !== 32 && raw.length !== 64)
      throw new InvalidArgumentError('a whsk_ secret must hold a 32-byte ed25519 seed');
    const key = createPrivateKey({
      key: Buffer.concat([ed25519Pkcs8Prefix, raw.subarray(0, 32)]),
      format: 'der',
      type: 'pkcs8',
    });
    return { kind: 'v1a', key };
  }
  if (!secret.startsWith('whsec_'))
    throw new InvalidArgumentError('a signing secret must start with whsec_ or whsk_');
  return { kind: 'v1', key: decodeStandardSecret(secret) };
}

/** The `webhook-signature` header value for one message attempt. */
export function signatureHeader(
  keys: readonly SigningKey[],
  id: string,
  timestampSeconds: number,
  body: Uint8Array,
): string {
  const prefix = `${id}.${timestampSeconds}.`;
  let content: Buffer | undefined;
  return keys
    .map((k) => {
      if (k.kind === 'v1') return `v1,${hmac('sha256', k.key, [prefix, body]).toString('base64')}`;
      content ??= Buffer.concat([Buffer.from(prefix, 'utf8'), body]);
      return `v1a,${sign(null, content, k.key).toString('base64')}`;
    })
    .join(' ');
}

/** A new `whsec_` secret of 32 random bytes (the spec asks for 24 to 64). */
export function generateWebhookSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

/** A new ed25519 pair: `whsk_` for the sender, `whpk_` for receivers (`createStandardWebhooksVerifier({ publicKeys })`). */
export function generateWebhookKeyPair(): { secretKey: string; publicKey: string } {
  const { privateKey } = generateKeyPairSync('ed25519');
  const seed = privateKey.export({ format: 'der', type: 'pkcs8' }).subarray(ed25519Pkcs8Prefix.length);
  const spki = createPublicKey(privateKey).export({ format: 'der', type: 'spki' });
  return {
    secretKey: `whsk_${seed.toString('base64')}`,
    publicKey: `whpk_${spki.subarray(12).toString('base64')}`,
  };
}
