/**
 * A Temporal-style activity worker in its own process, for seed scenario 7. It runs one
 * activity attempt through `runActivityCall` with a fake activity context (no Temporal server):
 * it charges a card at the provider (a real HTTP server in the parent), then records the charge.
 * With MODE=crash-after-call it prints CALLED after the provider answered and waits to be killed
 * with SIGKILL, before anything is recorded.
 *
 * env: DATABASE_URL, SCHEMA, PROVIDER_URL, WORKFLOW_ID, ACTIVITY_ID, RUN_ID, ATTEMPT, MODE
 */
import pg from 'pg';
import { fromPg } from '../../../src/adapters/pg.js';
import { assertOk, createResilientClient } from '../../../src/client/index.js';
import { createIdem } from '../../../src/operations/idem.js';
import { runActivityCall, type ActivityContextLike } from '../../../src/workflow/temporal.js';

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 2 });
// A short lease: the retry after a SIGKILL takes the dead attempt over once it lapses.
const idem = createIdem({ sql: fromPg(pool), schema: env('SCHEMA'), waitMs: 10_000, leaseMs: 500 });
const payments = createResilientClient({ baseUrl: env('PROVIDER_URL'), breaker: false });

// What Context.current() would be inside a Temporal worker.
const context: ActivityContextLike = {
  info: {
    workflowExecution: { workflowId: env('WORKFLOW_ID'), runId: env('RUN_ID') },
    activityId: env('ACTIVITY_ID'),
    activityType: 'chargeCard',
    workflowNamespace: 'default',
    attempt: Number(env('ATTEMPT')),
  },
};

const order = { orderId: 'order-42', amount: 4200 };
// The call runs with no transaction open; the charge row is written after, with its result.
const charge = await runActivityCall(
  idem,
  context,
  async ({ key, signal }) => {
    const res = await assertOk(
      await payments.fetch('/effects/charge', { method: 'POST', body: JSON.stringify(order), signal }),
    );
    const body = (await res.json()) as { id: string };
    if (process.env.MODE === 'crash-after-call') {
      process.stdout.write(`CALLED ${key}\n`);
      await new Promise(() => undefined); // the parent kills this process here
    }
    return { chargeId: body.id, key };
  },
  {
    request: order,
    record: (tx, answer) =>
      tx.query(`INSERT INTO "${env('SCHEMA')}".charges (order_id, provider_id) VALUES ($1, $2)`, [
        order.orderId,
        answer.chargeId,
      ]),
  },
);
process.stdout.write(`DONE ${JSON.stringify(charge)}\n`);
await pool.end();
