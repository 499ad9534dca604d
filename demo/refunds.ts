/**
 * `charge.refunded` webhooks from the provider. The receiver stores the verified receipt and
 * answers at once; this handler runs later in a processor worker.
 *
 * Why `sequence` ordering. A refund event carries a change (this refund's amount), not the
 * charge's whole state, so "latest wins" is wrong for it: three refunds of one charge sent at once
 * arrive in any order, and with latest-wins every refund older than one already applied was
 * recorded as stale and lost (the demo once booked 400 of a 600 refund). What keeps the books equal
 * to the provider's under any order and any number of workers:
 * - the entity is the charge and the version is the provider's per-charge `sequence`: refund n is
 *   applied only after refund n-1, by one worker at a time; a refund that arrives early waits;
 * - each refund is recorded once, by its refund id (the `refunds` table's primary key), whatever
 *   the number of deliveries or delivery ids, and reversed once in the ledger (one
 *   `payment.refunded` event per refund);
 * - applied in order, every event can be checked exactly: 0 < amount ≤ what is left to refund,
 *   and what we have refunded, this refund included, equals the provider's `amount_refunded`. An
 *   event that fails a check is refused (a dead letter with the reason), never applied;
 * - a refund webhook that never comes is not lost silently: the later refunds of its charge wait,
 *   then the charge is parked and shows in the console, `/metrics` and `idem webhooks parked`.
 * Recording each refund as its own entity, in no order, would sum the same amounts, but no event
 * could then be checked against what is left or against the provider's total, and a lost refund
 * would leave nothing waiting to show it.
 */
import { onBehalfOf } from '../src/core/causation.js';
import type { Outbox } from '../src/outbox/outbox.js';
import { InvalidWebhookEventError } from '../src/webhooks/errors.js';
import type { WebhookEvent } from '../src/webhooks/event.js';
import type { WebhookHandlers } from '../src/webhooks/processor.js';
import { createPaymentOperation, publicPayment, type PaymentRow } from './payments.js';
import type { ChargeRefundedEvent } from './provider.js';

/** The entity scope of charges, shared by every event type about a charge. */
export const chargeScope = 'provider-charge';

const isCount = (n: unknown): n is number => Number.isSafeInteger(n) && (n as number) > 0;

/** Checks that need nothing but the event: refused before anything is locked or written. */
export function refundEventProblem(event: WebhookEvent): string | undefined {
  const data = event.json<Partial<ChargeRefundedEvent>>().data;
  if (typeof data !== 'object' || data === null) return 'no data';
  if (typeof data.charge_id !== 'string' || data.charge_id === '') return 'no charge_id';
  if (typeof data.refund_id !== 'string' || !/^[\x21-\x7e]{1,255}$/.test(data.refund_id))
    return 'no valid refund_id';
  if (!isCount(data.amount)) return `the amount must be a positive integer (got ${String(data.amount)})`;
  if (!isCount(data.amount_refunded) || data.amount_refunded < data.amount)
    return 'amount_refunded must be an integer of at least the amount';
  // Every earlier refund was at least 1: a charge cannot have had more refunds than units refunded.
  if (!isCount(data.sequence) || data.sequence > data.amount_refunded)
    return `the sequence must be a positive integer no larger than amount_refunded (got ${String(data.sequence)})`;
  return undefined;
}

export function refundHandlers(demoSchema: string, outbox: Outbox): WebhookHandlers {
  return {
    provider: {
      'charge.refunded': {
        ordering: 'sequence',
        entity: (event) => {
          const { data } = event.json<ChargeRefundedEvent>();
          return { key: data.charge_id, version: data.sequence, scope: chargeScope };
        },
        validate: refundEventProblem,
        handle: async (tx, event) => {
          const { data } = event.json<ChargeRefundedEvent>();
          const { rows } = await tx.query<PaymentRow>(
            `SELECT * FROM ${demoSchema}.payments WHERE charge_id = $1 FOR UPDATE`,
            [data.charge_id],
          );
          const payment = rows[0];
          // The charge may be recorded on its payment a moment after the provider made it (the
          // payment's last step, resumed after a crash): retried with backoff, then a dead letter.
          if (!payment) throw new Error(`no payment records charge ${data.charge_id} yet`);
          const refunded = Number(payment.refunded);
          const left = Number(payment.amount) - refunded;
          if (data.amount > left) {
            throw new InvalidWebhookEventError(
              `refund ${data.refund_id} of ${data.amount} is more than is left to refund on ${payment.id} (${left})`,
            );
          }
          if (refunded + data.amount !== data.amount_refunded) {
            throw new InvalidWebhookEventError(
              `refund ${data.refund_id}: the provider has refunded ${data.amount_refunded} in all, ` +
                `the books ${refunded} + ${data.amount}`,
            );
          }
          const recorded = await tx.query(
            `INSERT INTO ${demoSchema}.refunds (refund_id, payment_id, charge_id, amount, sequence)
              VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`,
            [data.refund_id, payment.id, data.charge_id, data.amount, data.sequence],
          );
          if (recorded.rowCount === 0) {
            throw new InvalidWebhookEventError(
              `refund ${data.refund_id} (or sequence ${data.sequence} of ${data.charge_id}) was already recorded`,
            );
          }
          const updated = await tx.query<PaymentRow>(
            `UPDATE ${demoSchema}.payments SET status = 'refunded', refunded = refunded + $2 WHERE id = $1 RETURNING *`,
            [payment.id, data.amount],
          );
          const reversal = () =>
            outbox.add(tx, {
              tenant: payment.tenant,
              topic: 'payments',
              key: payment.id,
              type: 'payment.refunded',
              payload: {
                tenant: payment.tenant,
                ...publicPayment(updated.rows[0]!),
                refund_id: data.refund_id,
                refund_amount: data.amount,
                sequence: data.sequence,
              },
            });
          // The provider's webhook names no intent of ours: the refund acts on behalf of the
          // payment's, so the receipt, the `payment.refunded` event and the ledger's reversal show on
          // the payment's `idem trace` (a payment of an older demo database has no key to name it).
          const key = payment.idempotency_key;
          if (key === null) await reversal();
          else await onBehalfOf({ tenant: payment.tenant, operation: createPaymentOperation, key }, reversal);
        },
      },
    },
  };
}
