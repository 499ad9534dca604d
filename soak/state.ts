/**
 * Everything the verdict needs, read once: idem's tables, the demo's tables, and the provider's
 * charges (over its HTTP API, as the merchant would reconcile them).
 */
import type pg from 'pg';

export interface PaymentRecord {
  id: string;
  tenant: string;
  customer: string;
  amount: number;
  status: string;
  charge_id: string | null;
  refunded: number;
}

export interface LedgerEntry {
  payment_id: string;
  kind: 'credit' | 'reversal';
  amount: number;
  event_id: string;
}

export interface OutboxRow {
  id: string;
  key: string;
  type: string;
  published: boolean;
  dead: boolean;
  attempts: number;
  last_error: string | null;
}

export interface ProviderCharge {
  id: string;
  customer: string;
  amount: number;
  status: string;
  refunded: number;
}

export interface SoakState {
  payments: PaymentRecord[];
  ledger: LedgerEntry[];
  notifications: { payment_id: string }[];
  outbox: OutboxRow[];
  /** message_id → state, for the ledger consumer. */
  inbox: Map<string, string>;
  requests: { tenant: string; key: string; state: string; lapsed: boolean }[];
  receipts: Map<string, number>;
  tasks: Map<string, number>;
  charges: ProviderCharge[];
}

export async function readState(pool: pg.Pool, schema: string, providerUrl: string): Promise<SoakState> {
  const s = `"${schema}"`;
  const d = `"${schema}_demo"`;
  // One snapshot: read in parallel on separate connections, the inbox could be read before a
  // consumer's commit and the ledger after it (a ledger entry without its inbox row), which the
  // verdict took for a loss while consumers were still catching up after a broker restart.
  const client = await pool.connect();
  const query = async <T extends pg.QueryResultRow>(text: string) => (await client.query<T>(text)).rows;
  let rows;
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    // One client: node-postgres runs these one after another, all in the snapshot.
    rows = await Promise.all([
      query<PaymentRecord>(
        `SELECT id, tenant, customer, amount::float8 AS amount, status, charge_id, refunded::float8 AS refunded FROM ${d}.payments`,
      ),
      query<LedgerEntry>(`SELECT payment_id, kind, amount::float8 AS amount, event_id FROM ${d}.ledger`),
      query<{ payment_id: string }>(`SELECT payment_id FROM ${d}.notifications`),
      query<OutboxRow>(
        `SELECT id::text, aggregateid AS key, type, published_at IS NOT NULL AS published, dead_at IS NOT NULL AS dead, attempts, last_error FROM ${s}.outbox`,
      ),
      query<{ message_id: string; state: string }>(
        `SELECT message_id, state FROM ${s}.inbox WHERE consumer = 'ledger'`,
      ),
      query<{ tenant: string; key: string; state: string; lapsed: boolean }>(
        `SELECT tenant_id AS tenant, idempotency_key AS key, state, (state = 'pending' AND coalesce(locked_until, '-infinity') < now()) AS lapsed FROM ${s}.requests`,
      ),
      query<{ state: string; n: string }>(
        `SELECT state, count(*) AS n FROM ${s}.webhook_receipts GROUP BY state`,
      ),
      query<{ state: string; n: string }>(`SELECT state, count(*) AS n FROM ${s}.tasks GROUP BY state`),
    ]);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
  const [payments, ledger, notifications, outbox, inbox, requests, receipts, tasks] = rows;
  const response = await fetch(`${providerUrl}/charges`, { signal: AbortSignal.timeout(30_000) });
  const charges = ((await response.json()) as { data: ProviderCharge[] }).data;
  return {
    payments,
    ledger,
    notifications,
    outbox,
    inbox: new Map(inbox.map((r) => [r.message_id, r.state])),
    requests,
    receipts: new Map(receipts.map((r) => [r.state, Number(r.n)])),
    tasks: new Map(tasks.map((r) => [r.state, Number(r.n)])),
    charges,
  };
}
