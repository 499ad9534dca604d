/**
 * The one business handler every variant wraps: a transaction that inserts one order row. Only
 * where the transaction comes from differs: the plain handler and the peers open their own; idem
 * hands its transaction in, so the key and the row commit together.
 */
import type { Queryable, Sql } from '../../src/core/sql.js';

export interface OrderPayload {
  amount: number;
  currency: string;
}

export const samplePayload: OrderPayload = { amount: 1250, currency: 'EUR' };

export interface OrderResult {
  orderId: string;
}

/**
 * Hooks the drills use to fail a request at a chosen point. Every variant calls them at the same
 * place in the handler's own code: `beforeWrite` before the business write, `afterWrite` right after
 * it and before the handler returns to the idempotency layer. For the plain handler and the peers
 * the business transaction has committed by then; for idem it is still open, because idem's key and
 * stored result commit in that same transaction.
 */
export interface Faults {
  beforeWrite?: () => Promise<void>;
  afterWrite?: () => Promise<void>;
  /** Holds the transaction this long before writing, so concurrent duplicates really overlap. */
  holdMs?: number;
}

/** The business write, on a transaction someone else opened. */
export async function insertOrder(
  tx: Queryable,
  schema: string,
  key: string,
  payload: OrderPayload,
  holdMs = 0,
): Promise<OrderResult> {
  if (holdMs > 0) await tx.query('SELECT pg_sleep($1)', [holdMs / 1000]);
  const { rows } = await tx.query<{ id: string }>(
    `INSERT INTO "${schema}".orders (request_key, amount, currency) VALUES ($1, $2, $3) RETURNING id`,
    [key, payload.amount, payload.currency],
  );
  return { orderId: String(rows[0]!.id) };
}

/** The plain handler: its own transaction around the business write, with the drill's hooks. */
export async function createOrder(
  sql: Sql,
  schema: string,
  key: string,
  payload: OrderPayload,
  faults: Faults = {},
): Promise<OrderResult> {
  await faults.beforeWrite?.();
  const result = await sql.transaction((tx) => insertOrder(tx, schema, key, payload, faults.holdMs));
  await faults.afterWrite?.();
  return result;
}
