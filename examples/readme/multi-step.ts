// Multi-step operations: local steps are short transactions that record their result; a call to
// the outside world runs between them with no transaction held, with a derived key that is the
// same on every retry. A crash resumes from the last recorded step.
import type { Idem } from 'idem';

export async function chargeCustomer(idem: Idem, tenant: string, key: string, amount: number) {
  return idem.steps({ tenant, operation: 'charge', key, request: { amount } }, async (op) => {
    const payment = await op.step('record-payment', async (tx) => {
      const { rows } = await tx.query<{ id: string }>(
        'INSERT INTO payments (amount) VALUES ($1) RETURNING id',
        [amount],
      );
      return rows[0]!.id;
    });
    // No transaction, no pooled connection held while the provider answers; a heartbeat keeps
    // the lease, and `signal` aborts if a retry took the operation over meanwhile.
    const charge = await op.call('charge-card', async ({ key: chargeKey, signal }) => {
      const response = await fetch('https://provider.example/charges', {
        method: 'POST',
        headers: { 'idempotency-key': chargeKey, 'content-type': 'application/json' },
        body: JSON.stringify({ amount }),
        signal,
      });
      return (await response.json()) as { id: string };
    });
    await op.step('record-charge', (tx) =>
      tx.query('UPDATE payments SET charge_id = $1 WHERE id = $2', [charge.id, payment]),
    );
    return { payment, charge: charge.id };
  });
}
