/**
 * `charge.refunded` webhooks from the provider. The receiver stores the verified receipt and
 * answers at once; this handler runs later in a processor worker. It is order-aware: the entity is
 * the charge and the version is the provider's per-charge counter, so a late, older event is
 * recorded as stale and never moves the payment backwards.
 */
import type { Outbox } from '../outbox/outbox.js';
import type { WebhookHandlers } from '../webhooks/processor.js';
import { publicPayment, type PaymentRow } from './payments.js';

interface ChargeRefunded {
  type: 'charge.refunded';
  data: { charge_id: string; amount: number; version: number };
}

export function refundHandlers(demoSchema: string, outbox: Outbox): WebhookHandlers {
  return {
    provider: {
      'charge.refunded': {
        entity: (event) => {
          const { data } = event.json<ChargeRefunded>();
          return { key: data.charge_id, version: data.version, scope: 'provider-charge' };
        },
        handle: async (tx, event) => {
          const { data } = event.json<ChargeRefunded>();
          const { rows } = await tx.query<PaymentRow>(
            `UPDATE ${demoSchema}.payments SET status = 'refunded', refunded = refunded + $2 WHERE charge_id = $1 RETURNING *`,
            [data.charge_id, data.amount],
          );
          const payment = rows[0];
          if (!payment) return; // a charge this service never made: recorded as applied, nothing to do
          await outbox.add(tx, {
            topic: 'payments',
            key: payment.id,
            type: 'payment.refunded',
            payload: {
              tenant: payment.tenant,
              ...publicPayment(payment),
              refund_amount: data.amount,
              version: data.version,
            },
          });
        },
      },
    },
  };
}
