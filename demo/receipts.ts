/**
 * Receipt notifications: a polling worker claims `receipts` tasks (enqueued with the payment, in
 * its transaction) and records one notification per payment. The notification and the task's
 * completion commit together under the claim's fencing token, so a worker that lost its lease
 * can never notify twice.
 */
import type { Claims } from '../src/claims/claims.js';
import { work } from '../src/claims/worker.js';

export function startReceiptWorker(claims: Claims, demoSchema: string): { stop(): Promise<void> } {
  const controller = new AbortController();
  const loop = work<{ paymentId: string }, void, unknown>(
    claims,
    'receipts',
    async (tx, task) => {
      await tx.query(
        `INSERT INTO ${demoSchema}.notifications (tenant, payment_id, channel) VALUES ($1, $2, 'email')`,
        [task.tenant, task.payload.paymentId],
      );
    },
    {
      batchSize: 10,
      pollMs: 250,
      signal: controller.signal,
      onError: (e) => console.error('receipt worker:', e),
    },
  );
  return {
    async stop() {
      controller.abort();
      await loop;
    },
  };
}
