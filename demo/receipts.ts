/**
 * Receipt notifications: a polling worker claims `receipts` tasks (enqueued with the payment, in
 * its transaction) and records one notification per payment. The notification and the task's
 * completion commit together under the claim's fencing token, so a worker that lost its lease
 * can never notify twice.
 */
import type { Claims } from '../src/claims/claims.js';
import { createClaimsWorker, type ClaimsWorker } from '../src/claims/worker.js';
import type { IdemEvents } from '../src/core/event-channel.js';

export function createReceiptWorker(
  claims: Claims,
  demoSchema: string,
  events: IdemEvents,
): ClaimsWorker<{ paymentId: string }, void, unknown> {
  return createClaimsWorker<{ paymentId: string }, void, unknown>({
    claims,
    queue: 'receipts',
    handler: async (tx, task) => {
      await tx.query(
        `INSERT INTO ${demoSchema}.notifications (tenant, payment_id, channel) VALUES ($1, $2, 'email')`,
        [task.tenant, task.payload.paymentId],
      );
    },
    batchSize: 10,
    pollIntervalMs: 250,
    events,
  });
}
