// Multi-step operations: each step commits its own result; a crash resumes from the last one,
// and the external call carries a derived key that is the same on every retry.
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
    const charge = await op.step('charge-card', async (_tx, { key: chargeKey }) => {
      const response = await fetch('https://provider.example/charges', {
        method: 'POST',
        headers: { 'idempotency-key': chargeKey, 'content-type': 'application/json' },
        body: JSON.stringify({ amount }),
      });
      return (await response.json()) as { id: string };
    });
    await op.step('record-charge', (tx) =>
      tx.query('UPDATE payments SET charge_id = $1 WHERE id = $2', [charge.id, payment]),
    );
    return { payment, charge: charge.id };
  });
}
