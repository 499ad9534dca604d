// The example of docs/guide/client.md. `npm run typecheck` compiles it,
// test/docs/guide-examples.test.ts checks the guide shows it as it is and runs it.
import { assertOk, createResilientClient, isCircuitOpen } from 'idem/client';

const provider = createResilientClient({
  baseUrl: process.env.PROVIDER_URL,
  timeoutMs: 5000,
  maxAttempts: 4,
});

/** Call it from a call with its key: `op.call('charge', ({ key }) => charge(key, 1250))`. */
export async function charge(key: string, amount: number) {
  try {
    // Retried on network errors, timeouts, 408, 429 and 5xx, with the same key every time.
    const response = await provider.fetch('/charges', {
      method: 'POST',
      idempotencyKey: key,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ amount }),
    });
    return (await (await assertOk(response)).json()) as { id: string }; // HttpStatusError otherwise
  } catch (error) {
    if (isCircuitOpen(error)) console.warn(`provider unhealthy; retry in ${error.retryAfterMs} ms`);
    throw error; // retryable or not, as the error says: the step's caller retries the same key
  }
}
