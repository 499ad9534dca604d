/**
 * Helpers every verifier uses: constant-time comparison, strict decoding of signatures, timestamp
 * tolerance, delivery-id validation. Hand-written on node:crypto because each is a few lines and the
 * packages that offer them either lack a scheme (v1a) or decode the body as text (see
 * standard-webhooks.ts).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { InvalidArgumentError } from '../../core/errors.js';
import { WebhookMalformedError, WebhookUnauthorizedError } from '../errors.js';
import type { Secret, ToleranceOptions } from './types.js';

const day = 86_400_000;

/** Three days of sender redelivery plus one day of margin. */
export const defaultRetentionMs = 4 * day;

/** Compares two byte strings in time that depends only on their length (which is public). */
export function safeEqual(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** HMAC of `parts` concatenated, without copying the body into a string. */
export function hmac(algorithm: string, key: Uint8Array, parts: readonly (string | Uint8Array)[]): Buffer {
  const mac = createHmac(algorithm, key);
  for (const part of parts) mac.update(part);
  return mac.digest();
}

const hexPattern = /^(?:[0-9a-fA-F]{2})+$/;
const base64Pattern = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const base64UrlPattern = /^[A-Za-z0-9_-]+={0,2}$/;

/** Signature encodings the verifiers accept. */
export type SignatureEncoding = 'hex' | 'base64' | 'base64url';

/** Whether `given` equals one of the `expected` MACs; each comparison in constant time. */
export function matchesOne(expected: readonly Uint8Array[], given: Uint8Array): boolean {
  return expected.some((mac) => safeEqual(mac, given));
}

/**
 * Checks signatures given as text in `encoding` against the HMAC-SHA256 of `signed` under each of
 * `keys`: true when one matches. The HMACs are computed once, on the first check, so a header
 * listing several signatures costs one HMAC per key; one that does not decode matches nothing.
 */
export function hmacSha256Check(
  keys: readonly Uint8Array[],
  signed: readonly (string | Uint8Array)[],
  encoding: SignatureEncoding,
): (text: string) => boolean {
  let expected: Buffer[] | undefined;
  return (text) => {
    const given = decodeSignature(text, encoding);
    if (!given) return false;
    expected ??= keys.map((key) => hmac('sha256', key, signed));
    return matchesOne(expected, given);
  };
}

/** Decodes a signature strictly; `undefined` when it is not valid in `encoding`. */
export function decodeSignature(text: string, encoding: SignatureEncoding): Buffer | undefined {
  if (text.length === 0) return undefined;
  if (encoding === 'hex') return hexPattern.test(text) ? Buffer.from(text, 'hex') : undefined;
  if (encoding === 'base64') return base64Pattern.test(text) ? Buffer.from(text, 'base64') : undefined;
  return base64UrlPattern.test(text) ? Buffer.from(text.replace(/=+$/, ''), 'base64url') : undefined;
}

/** Secrets as UTF-8 key bytes (GitHub, Stripe, the generic verifier): text is used as it is. */
export function utf8Keys(secrets: readonly Secret[] | undefined, what: string): Uint8Array[] {
  const list = requireSecrets(secrets, what);
  return list.map((s) => (typeof s === 'string' ? Buffer.from(s, 'utf8') : Uint8Array.from(s)));
}

export function requireSecrets<T>(secrets: readonly T[] | undefined, what: string): readonly T[] {
  if (!secrets || secrets.length === 0) {
    throw new InvalidArgumentError(`${what}: at least one secret is required`);
  }
  for (const s of secrets) {
    if ((typeof s === 'string' || s instanceof Uint8Array) && s.length === 0) {
      throw new InvalidArgumentError(`${what}: secrets must not be empty`);
    }
  }
  return secrets;
}

/** Reads a required header; a missing one is malformed (400). */
export function requireHeader(value: string | undefined, name: string): string {
  if (value === undefined || value.trim() === '')
    throw new WebhookMalformedError(`the ${name} header is missing`);
  return value.trim();
}

const deliveryIdPattern = /^[\x21-\x7e]{1,255}$/;

/** Delivery ids are keys: 1–255 printable ASCII characters without spaces. */
export function validateDeliveryId(id: string, what: string): string {
  if (!deliveryIdPattern.test(id)) {
    throw new WebhookMalformedError(`${what} must be 1–255 printable ASCII characters`);
  }
  return id;
}

/** Parses a Unix timestamp in seconds; malformed (400) when it is not a plain integer. */
export function parseUnixSeconds(text: string, what: string): number {
  if (!/^\d{1,12}$/.test(text)) throw new WebhookMalformedError(`${what} is not a Unix timestamp in seconds`);
  return Number(text) * 1000;
}

/** Resolved tolerance in milliseconds. */
export interface Tolerance {
  pastMs: number;
  futureMs: number;
}

export function resolveTolerance(options: ToleranceOptions, what: string): Tolerance {
  const past = options.toleranceSeconds ?? 300;
  const future = options.futureToleranceSeconds ?? past;
  for (const [name, value] of [
    ['toleranceSeconds', past],
    ['futureToleranceSeconds', future],
  ] as const) {
    if (!Number.isFinite(value) || value < 0) {
      throw new InvalidArgumentError(`${what}: ${name} must be a non-negative number`);
    }
  }
  return { pastMs: past * 1000, futureMs: future * 1000 };
}

/** The signing time from a Unix-seconds `timestamp`; 401 when it lies outside the tolerance. */
export function signedWithin(timestamp: string, what: string, now: number, tolerance: Tolerance): number {
  const signedAt = parseUnixSeconds(timestamp, what);
  checkTolerance(signedAt, now, tolerance);
  return signedAt;
}

/** Throws 401 when `signedAt` lies outside the tolerance around `now`, in either direction. */
export function checkTolerance(signedAt: number, now: number, tolerance: Tolerance): void {
  if (signedAt < now - tolerance.pastMs) throw new WebhookUnauthorizedError('timestamp-too-old');
  if (signedAt > now + tolerance.futureMs) throw new WebhookUnauthorizedError('timestamp-too-new');
}

/** The body parsed as a JSON object, or `undefined` when it is not one. */
export function jsonObject(body: Uint8Array): Record<string, unknown> | undefined {
  try {
    const text = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
    const parsed: unknown = JSON.parse(text);
    return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)
      ? (parsed as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/** An event type, when it is a non-empty string of at most 255 characters. */
export function eventTypeOf(value: unknown): string | null {
  return typeof value === 'string' && value.length > 0 && value.length <= 255 ? value : null;
}
