/**
 * Standard Webhooks (https://www.standardwebhooks.com): `webhook-id`, `webhook-timestamp` and
 * `webhook-signature`, a space-delimited list of `v1,<base64 HMAC-SHA256>` and
 * `v1a,<base64 ed25519>` signatures over `${id}.${timestamp}.${body}`.
 *
 * Providers that send through Svix name the same three headers `svix-id`, `svix-timestamp` and
 * `svix-signature`: same scheme, same signed content. Either set is accepted, never a mix of the two
 * in one delivery (400): with a mix, which id was signed and which one is the dedupe key could
 * differ, and no sender does that on purpose.
 *
 * Written on node:crypto rather than on the `standardwebhooks` npm package (which the tests use as
 * the reference signer) because that package (1.1.1): verifies `v1` only, skipping every `v1a`
 * signature; turns a Buffer body into a UTF-8 string before hashing, so a body that is not valid
 * UTF-8 is hashed as different bytes than were received; reads `Date.now()` with a fixed five-minute
 * window, so time cannot be injected or the tolerance chosen; and hashes in JavaScript (fast-sha256)
 * where node:crypto uses OpenSSL. bench/webhooks.bench.ts measures the two side by side.
 */
import { createPublicKey, verify as verifySignature, type KeyObject } from 'node:crypto';
import { InvalidArgumentError } from '../../core/errors.js';
import { WebhookMalformedError, WebhookUnauthorizedError } from '../errors.js';
import {
  decodeSignature,
  defaultRetentionMs,
  eventTypeOf,
  hmacSha256Check,
  jsonObject,
  requireHeader,
  resolveTolerance,
  signedWithin,
  validateDeliveryId,
} from './common.js';
import type { Secret, ToleranceOptions, VerifiedDelivery, WebhookRequest, WebhookVerifier } from './types.js';

/** Options of `createStandardWebhooksVerifier`. At least one secret or public key is required. */
export interface StandardWebhooksOptions extends ToleranceOptions {
  /**
   * Symmetric secrets for `v1` signatures: `whsec_<base64>` (the prefix is optional) or raw key
   * bytes. List the old and the new secret while rotating; any one matching is enough.
   */
  secrets?: Secret[];
  /**
   * Public keys for `v1a` (ed25519) signatures: `whpk_<base64 of the 32-byte key>` (the prefix is
   * optional) or a `KeyObject`. Several may be listed for rotation.
   */
  publicKeys?: (string | KeyObject)[];
  /** Receipt retention. Default 4 days: the ~3-day example retry schedule of the spec plus margin. */
  retentionMs?: number;
}

/** The three header names of one delivery: the spec's, or the ones Svix sends. */
interface HeaderNames {
  id: string;
  timestamp: string;
  signature: string;
}

const standardHeaders: HeaderNames = {
  id: 'webhook-id',
  timestamp: 'webhook-timestamp',
  signature: 'webhook-signature',
};
const svixHeaders: HeaderNames = { id: 'svix-id', timestamp: 'svix-timestamp', signature: 'svix-signature' };

/** The set this delivery uses; a delivery carrying headers of both sets is malformed. */
function headerNames(request: WebhookRequest): HeaderNames {
  const uses = (names: HeaderNames) =>
    [names.id, names.timestamp, names.signature].some((name) => request.headers.get(name) !== undefined);
  const svix = uses(svixHeaders);
  if (svix && uses(standardHeaders)) {
    throw new WebhookMalformedError('the delivery mixes webhook-* and svix-* headers; send one set');
  }
  return svix ? svixHeaders : standardHeaders;
}
/** DER prefix of an ed25519 SubjectPublicKeyInfo; the raw 32-byte key follows it. */
const ed25519SpkiPrefix = Buffer.from('302a300506032b6570032100', 'hex');

/** Decodes a `whsec_…` secret (or bare base64) to key bytes. */
export function decodeStandardSecret(secret: Secret): Uint8Array {
  if (typeof secret !== 'string') return Uint8Array.from(secret);
  const key = Buffer.from(secret.startsWith('whsec_') ? secret.slice(6) : secret, 'base64');
  if (key.length === 0) throw new InvalidArgumentError('a Standard Webhooks secret decodes to no bytes');
  return key;
}

/** Decodes a `whpk_…` public key (or bare base64 of 32 bytes) to an ed25519 `KeyObject`. */
export function decodeStandardPublicKey(key: string | KeyObject): KeyObject {
  if (typeof key !== 'string') return key;
  const raw = Buffer.from(key.startsWith('whpk_') ? key.slice(5) : key, 'base64');
  if (raw.length !== 32) throw new InvalidArgumentError('a Standard Webhooks public key must be 32 bytes');
  return createPublicKey({ key: Buffer.concat([ed25519SpkiPrefix, raw]), format: 'der', type: 'spki' });
}

/** Verifies Standard Webhooks `v1` and `v1a` signatures. */
export function createStandardWebhooksVerifier(options: StandardWebhooksOptions): WebhookVerifier {
  const keys = (options.secrets ?? []).map(decodeStandardSecret);
  const publicKeys = (options.publicKeys ?? []).map(decodeStandardPublicKey);
  if (keys.length === 0 && publicKeys.length === 0) {
    throw new InvalidArgumentError(
      'createStandardWebhooksVerifier: at least one secret or public key is required',
    );
  }
  const tolerance = resolveTolerance(options, 'createStandardWebhooksVerifier');
  return {
    scheme: 'standard-webhooks',
    retentionMs: options.retentionMs ?? defaultRetentionMs,
    storedHeaders: [
      standardHeaders.id,
      standardHeaders.timestamp,
      svixHeaders.id,
      svixHeaders.timestamp,
      'content-type',
      'user-agent',
    ],
    signatureHeaders: [standardHeaders.signature, svixHeaders.signature],
    verify(request: WebhookRequest, now: number): VerifiedDelivery {
      const names = headerNames(request);
      const signatures = request.headers.get(names.signature);
      if (signatures === undefined || signatures.trim() === '') {
        throw new WebhookUnauthorizedError('signature-missing');
      }
      const id = validateDeliveryId(requireHeader(request.headers.get(names.id), names.id), names.id);
      // The spec forbids '.' in the id: with one, `${id}.${timestamp}.` could be re-split so that a
      // signature made for another id and timestamp verifies.
      if (id.includes('.')) throw new WebhookMalformedError(`${names.id} must not contain "."`);
      const timestamp = requireHeader(request.headers.get(names.timestamp), names.timestamp);
      const signedAt = signedWithin(timestamp, names.timestamp, now, tolerance);

      const prefix = `${id}.${timestamp}.`;
      let supported = false;
      const v1Matches = hmacSha256Check(keys, [prefix, request.body], 'base64');
      let content: Buffer | undefined;
      for (const entry of signatures.trim().split(/\s+/)) {
        const comma = entry.indexOf(',');
        if (comma < 0) continue;
        const version = entry.slice(0, comma);
        if (version === 'v1' && keys.length > 0) {
          supported = true;
          if (v1Matches(entry.slice(comma + 1))) return delivered(id, signedAt, request.body);
        } else if (version === 'v1a' && publicKeys.length > 0) {
          supported = true;
          const given = decodeSignature(entry.slice(comma + 1), 'base64');
          if (!given || given.length !== 64) continue;
          content ??= Buffer.concat([Buffer.from(prefix, 'utf8'), request.body]);
          for (const key of publicKeys) {
            if (verifySignature(null, content, key, given)) return delivered(id, signedAt, request.body);
          }
        }
      }
      throw new WebhookUnauthorizedError(supported ? 'signature-mismatch' : 'signature-unsupported');
    },
  };
}

function delivered(id: string, signedAt: number, body: Uint8Array): VerifiedDelivery {
  return { deliveryId: id, signedAt, eventType: eventTypeOf(jsonObject(body)?.type) };
}
