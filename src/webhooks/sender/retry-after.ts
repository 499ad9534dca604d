/** `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3). */

/** The delay asked for, in ms from `now`, or `undefined` when the header is absent or unreadable. */
export function parseRetryAfter(value: string | null | undefined, now: number): number | undefined {
  if (value === null || value === undefined) return undefined;
  const text = value.trim();
  if (/^\d{1,10}$/.test(text)) return Number(text) * 1000;
  const date = Date.parse(text);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - now);
}
