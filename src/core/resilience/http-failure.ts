/**
 * What an HTTP answer's status says about a retry and about the downstream's health, decided once
 * for the HTTP client and the webhook sender.
 */

/**
 * Statuses worth a retry of the same request: 408 Request Timeout, 425 Too Early, 429 Too Many
 * Requests, and every 5xx except 501 Not Implemented, which RFC 9110 defines as a permanent lack
 * of support (a retry cannot change it).
 */
export function isRetryableStatus(status: number): boolean {
  return (
    status === 408 || status === 425 || status === 429 || (status >= 500 && status <= 599 && status !== 501)
  );
}

/**
 * Whether an answer counts toward opening the downstream's circuit breaker: a retryable status
 * except 429 and 425. A 429 is the downstream protecting itself, quickly and correctly: it is
 * not broken, `Retry-After` is how it asks us to slow down, and an open breaker would stop even
 * the requests its rate limit still admits (other keys, other tenants). A 425 asks for a replay
 * after the TLS handshake, which says nothing of the server's health. 4xx answers are about our
 * request, not the downstream.
 */
export function isUnhealthyStatus(status: number): boolean {
  return isRetryableStatus(status) && status !== 429 && status !== 425;
}
