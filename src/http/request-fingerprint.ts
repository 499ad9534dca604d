import { createHash } from 'node:crypto';
import { fingerprint } from '../core/fingerprint.js';

/** What identifies a request's intent, besides its key. */
export interface FingerprintInput {
  method: string;
  /** Route pattern, e.g. `/orders/:id`. */
  route: string;
  /** Raw path, e.g. `/orders/17`: the same key on another order is another request. */
  path: string;
  /** Raw query string without `?`. */
  query: string;
  /** The parsed body: a JSON value, a string, bytes, or undefined. */
  body: unknown;
}

/**
 * SHA-256 over the canonical JSON (RFC 8785, via the core `fingerprint`) of
 * `{ method, route, path, query, body }`. A JSON body enters as its parsed value, so whitespace
 * and key order never change the fingerprint; `exclude` removes dotted paths inside the body.
 * A text body enters as its string, a binary body as the SHA-256 of its bytes. The query enters
 * as sorted name/value pairs (unless `includeQuery` is false).
 */
export function requestFingerprint(
  input: FingerprintInput,
  exclude: readonly string[],
  includeQuery: boolean,
): string {
  const request = {
    method: input.method,
    route: input.route,
    path: input.path,
    query: includeQuery ? canonicalQuery(input.query) : [],
    body: canonicalBody(input.body),
  };
  return fingerprint(request, exclude.length ? { exclude: exclude.map((p) => `body.json.${p}`) } : {});
}

function canonicalBody(body: unknown): unknown {
  if (body === undefined || body === null) return null;
  if (body instanceof Uint8Array) {
    return { bytes: createHash('sha256').update(body).digest('hex') };
  }
  if (typeof body === 'string') return { text: body };
  return { json: body };
}

function canonicalQuery(query: string): [string, string][] {
  if (!query) return [];
  return [...new URLSearchParams(query)].sort(([a, av], [b, bv]) =>
    a < b ? -1 : a > b ? 1 : av < bv ? -1 : av > bv ? 1 : 0,
  );
}
