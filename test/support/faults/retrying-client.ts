/**
 * A client as real clients behave: the same Idempotency-Key on every retry, after a network error,
 * a timeout, a 409 (after Retry-After, capped) or a 5xx; bounded in attempts and time.
 */
export interface Attempted {
  status: number;
  body: string;
  replayed: boolean;
  attempts: number;
  /** Every answer before the final one: statuses, or `network`. */
  seen: string[];
}

export async function postUntilAnswered(
  url: string,
  key: string,
  body: unknown,
  options: { timeoutMs?: number; deadlineMs?: number; headers?: Record<string, string> } = {},
): Promise<Attempted> {
  const deadline = Date.now() + (options.deadlineMs ?? 60_000);
  const seen: string[] = [];
  for (let attempts = 1; ; attempts++) {
    if (Date.now() > deadline)
      throw new Error(`no final answer for ${key} after ${attempts - 1} attempts: ${seen.join(' ')}`);
    try {
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key, ...options.headers },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(options.timeoutMs ?? 10_000),
      });
      const text = await response.text();
      if (response.status === 409 || response.status >= 500) {
        seen.push(String(response.status));
        const retryAfter = Number(response.headers.get('retry-after') ?? 0);
        await new Promise((r) => setTimeout(r, Math.min(retryAfter * 1000, 200) + 50));
        continue;
      }
      return {
        status: response.status,
        body: text,
        replayed: response.headers.get('idempotent-replayed') === 'true',
        attempts,
        seen,
      };
    } catch {
      seen.push('network');
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
