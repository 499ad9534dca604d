/**
 * Headers the console never shows. Signature headers are never stored by idem's webhook receiver,
 * but headers also come from brokers, stored HTTP responses and outbox producers, so the console
 * hides anything that can carry a credential, whatever wrote it.
 */
const exact = new Set([
  'authorization',
  'proxy-authorization',
  'cookie',
  'set-cookie',
  'x-api-key',
  'api-key',
  'x-auth-token',
  'x-csrf-token',
  'x-xsrf-token',
]);
const partial = /signature|secret|token|password|passwd|credential|session|private/i;

export const redacted = '[redacted]';

export function isSensitiveHeader(name: string): boolean {
  const n = name.toLowerCase();
  return exact.has(n) || partial.test(n);
}

/** Headers as [name, value] pairs, sensitive values replaced; accepts an object or a pair list. */
export function redactHeaders(headers: unknown): [string, string][] {
  let pairs: [string, unknown][] = [];
  if (Array.isArray(headers)) {
    pairs = headers
      .filter((h): h is [string, unknown] => Array.isArray(h) && typeof h[0] === 'string')
      .map((h) => [h[0], h[1]]);
  } else if (headers !== null && typeof headers === 'object') {
    pairs = Object.entries(headers);
  }
  return pairs.map(([name, value]) => [
    name,
    isSensitiveHeader(name) ? redacted : typeof value === 'string' ? value : JSON.stringify(value),
  ]);
}

/** A URL without its query, fragment and credentials (where endpoint tokens tend to live). */
export function safeUrl(value: string): string {
  try {
    const url = new URL(value);
    return `${url.protocol}//${url.host}${url.pathname}${url.search ? '?…' : ''}`;
  } catch {
    return '(unparseable URL)';
  }
}
