// The README's saga example. `npm run typecheck` compiles it, test/docs/readme-examples.test.ts
// checks the README shows it as it is.
import type { Sql } from 'idem';
import { assertOk, createClient } from 'idem/client';
import { createSagas, defineSaga, isSagaFailed, step } from 'idem/workflow';

// Inside an action or a compensation, the client sends that step's own key as Idempotency-Key.
const http = createClient();
const post = async (url: string, body: unknown): Promise<unknown> =>
  (await assertOk(await http.fetch(url, { method: 'POST', body: JSON.stringify(body) }))).json();

export const checkout = defineSaga<{ orderId: string; amount: number }>({
  name: 'checkout',
  steps: [
    step({
      name: 'reserve',
      action: ({ input }) => post('http://stock.internal/reservations', input),
      compensate: ({ actionKey }) => post('http://stock.internal/releases', { reservation: actionKey }),
    }),
    step({
      name: 'charge',
      action: ({ input }) => post('http://payments.internal/charges', input),
      // Runs also when the charge's outcome is unknown: refund the charge made with actionKey, if any.
      compensate: ({ actionKey }) => post('http://payments.internal/refunds', { charge: actionKey }),
    }),
  ],
});

export async function placeOrder(sql: Sql, orderId: string, amount: number) {
  const sagas = createSagas({ sql, sagas: [checkout] }); // and sagas.recover() on a timer
  try {
    await sagas.run(checkout, { tenant: 'acme', key: `order-${orderId}`, input: { orderId, amount } });
    return 'placed';
  } catch (error) {
    if (isSagaFailed(error)) return 'rolled back'; // each started step compensated, once
    throw error; // SagaStuckError: a compensation kept failing; sagas.list() shows it to an operator
  }
}
