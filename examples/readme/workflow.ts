// The saga example of docs/guide/sagas.md. `npm run typecheck` compiles it,
// test/docs/guide-examples.test.ts checks the guide shows it as it is.
import type { Sql } from 'idem';
import { assertOk, createResilientClient } from 'idem/client';
import { createSagas, defineSaga, isSagaFailed, step } from 'idem/workflow';

// Inside a call, the client sends that step's own key as Idempotency-Key.
const http = createResilientClient();
const post = async (url: string, body: unknown, signal?: AbortSignal): Promise<{ id: string }> => {
  const response = await http.fetch(url, { method: 'POST', body: JSON.stringify(body), signal });
  return (await assertOk(response)).json() as Promise<{ id: string }>;
};

export const checkout = defineSaga<{ orderId: string; amount: number }>({
  name: 'checkout',
  steps: [
    step({
      name: 'reserve',
      // `call` runs with no transaction held; `compensateCall` undoes it the same way.
      call: ({ input, signal }) => post('http://stock.internal/reservations', input, signal),
      compensateCall: ({ actionKey }) => post('http://stock.internal/releases', { reservation: actionKey }),
    }),
    step({
      name: 'charge',
      call: ({ input, signal }) => post('http://payments.internal/charges', input, signal),
      // Local writes that go with the answer commit with the step's recorded result.
      record: ({ tx, input, response }) =>
        tx.query('UPDATE orders SET charge_id = $2 WHERE id = $1', [input.orderId, response.id]),
      // Runs also when the charge's outcome is unknown: refund the charge made with actionKey, if any.
      compensateCall: ({ actionKey }) => post('http://payments.internal/refunds', { charge: actionKey }),
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
