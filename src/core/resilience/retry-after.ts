/**
 * `Retry-After` (RFC 9110 §10.2.3), read one way for the HTTP client and the webhook sender, and
 * one meaning of `maxRetryAfterMs` in every module that honours it: the longest wait a
 * `Retry-After` may ask for; a longer ask is capped to it (the retry happens, no later than that).
 */

/**
 * Parses a `Retry-After` header: either a number of seconds or an HTTP-date. Returns the wait in
 * ms from `now` (never negative), or undefined when absent or malformed. A date in the past means
 * "now" (0 ms).
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
  // forms, all of which Date.parse reads. Anything without a weekday/month name is refused: V8's
  // Date.parse reads "1.5" as January 5th 2001, which made a 1.5-second ask a 0 ms wait.
  if (!/[A-Za-z]{3}/.test(text)) return undefined;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}

/**
 * The wait before a retry: the backoff's, or longer when the downstream asked for more, its ask
 * capped at `maxRetryAfterMs`.
 */
export function retryDelay(
  backoffMs: number,
  retryAfterMs: number | undefined,
  maxRetryAfterMs: number,
): number {
  if (retryAfterMs === undefined || !(retryAfterMs >= 0)) return backoffMs;
  return Math.max(backoffMs, Math.min(retryAfterMs, maxRetryAfterMs));
}
