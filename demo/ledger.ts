/**
 * The ledger: an inbox consumer of the `payments` topic. One credit per `payment.created`, one
 * reversal per `payment.refunded`; the inbox records the event id in the same transaction, so a
 * redelivered event is acknowledged without a second entry.
 */
import type { Transaction } from '../src/core/sql.js';

export interface PaymentEvent {
  id: string;
  type: string;
  payload: unknown;
}

export const ledgerConsumer = 'ledger';

export async function applyToLedger(tx: Transaction, demoSchema: string, event: PaymentEvent): Promise<void> {
  const p = event.payload as {
    tenant: string;
    id: string;
    customer: string;
    amount: number;
    charge_id?: string;
    refund_amount?: number;
  };
  if (event.type === 'payment.created') {
    await tx.query(
      `INSERT INTO ${demoSchema}.ledger (tenant, customer, payment_id, charge_id, kind, amount, event_id) VALUES ($1, $2, $3, $4, 'credit', $5, $6)`,
      [p.tenant, p.customer, p.id, p.charge_id ?? null, p.amount, event.id],
    );
  } else if (event.type === 'payment.refunded') {
    await tx.query(
      `INSERT INTO ${demoSchema}.ledger (tenant, customer, payment_id, charge_id, kind, amount, event_id) VALUES ($1, $2, $3, $4, 'reversal', $5, $6)`,
      [p.tenant, p.customer, p.id, p.charge_id ?? null, -(p.refund_amount ?? p.amount), event.id],
    );
  }
}
