/**
 * Parses a `Retry-After` header (RFC 9110 §10.2.3): either a number of seconds or an HTTP-date.
 * Returns the wait in ms from `now` (never negative), or undefined when absent or malformed.
 * A date in the past means "now" (0 ms).
 */
export function parseRetryAfter(value: string | null | undefined, now: number): number | undefined {
  if (value === null || value === undefined) return undefined;
  const text = value.trim();
  if (text === '') return undefined;
  if (/^\d+$/.test(text)) {
    const seconds = Number(text);
    return Number.isSafeInteger(seconds) ? seconds * 1000 : undefined;
  }
  // HTTP-date: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), or the obsolete RFC 850 and asctime
  // forms, all of which Date.parse reads. Anything without a weekday/month name is refused so
  // that e.g. "1.5" or "-1" is not read as a date.
  if (!/[A-Za-z]{3}/.test(text)) return undefined;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}
