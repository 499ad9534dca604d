import * as crypto from 'node:crypto';
import canonicalize from 'canonicalize';
import { InvalidArgumentError } from './errors.js';

/** What goes into a request's fingerprint. */
export interface FingerprintOptions {
  /**
   * Dotted paths removed before hashing, e.g. `['clientTime', 'meta.traceId']`. Use it for fields
   * that legitimately differ between retries of one intent. Default: none.
   */
  exclude?: readonly string[];
}

/**
 * SHA-256 (hex) over the RFC 8785 canonical JSON form of `request`: object keys are sorted and
 * numbers are written the one way JavaScript writes them, so `{"b":1,"a":1.0}` and `{"a":1,"b":1}`
 * give the same fingerprint. `undefined` fields are dropped, as JSON does.
 */
export function fingerprint(request: unknown, options: FingerprintOptions = {}): string {
  const projected = options.exclude?.length ? withoutPaths(request, options.exclude) : request;
  const canonical = canonicalize(projected === undefined ? null : projected);
  if (canonical === undefined) throw new InvalidArgumentError('request cannot be expressed as JSON');
  return sha256Hex(canonical);
}

type OneShotHash = (algorithm: string, data: string, encoding: 'hex') => string;
/** `crypto.hash` (Node ≥ 20.12): one call instead of a Hash object and its stream machinery. */
const oneShot = (crypto as { hash?: OneShotHash }).hash;

/**
 * SHA-256 of a string, hex. The one-shot hash took 0.27 µs against 0.75–0.86 µs for
 * createHash().update().digest() on a 60-byte string (Node 20.20, the 2-core bench machine), and
 * it runs once per keyed call.
 */
export function sha256Hex(data: string): string {
  return oneShot ? oneShot('sha256', data, 'hex') : crypto.createHash('sha256').update(data).digest('hex');
}

function withoutPaths(value: unknown, paths: readonly string[]): unknown {
  const copy: unknown = structuredClone(value);
  for (const path of paths) {
    const parts = path.split('.');
    let node: unknown = copy;
    for (let i = 0; i < parts.length - 1 && node !== null && typeof node === 'object'; i++) {
      node = (node as Record<string, unknown>)[parts[i]!];
    }
    if (node !== null && typeof node === 'object') delete (node as Record<string, unknown>)[parts.at(-1)!];
  }
  return copy;
}
