/** The demo's business tables, in their own schema beside idem's. */
export function demoSchemaSql(schema: string): string {
  return `
CREATE SCHEMA IF NOT EXISTS ${schema};
CREATE TABLE IF NOT EXISTS ${schema}.payments (
  id          text        PRIMARY KEY,
  tenant      text        NOT NULL,
  customer    text        NOT NULL,
  amount      bigint      NOT NULL,
  currency    text        NOT NULL,
  status      text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'declined', 'refunded')),
  charge_id   text,
  refunded    bigint      NOT NULL DEFAULT 0,
  created_at  timestamptz NOT NULL DEFAULT now()
);
-- The Idempotency-Key the payment was made under: with the tenant and the operation it names the
-- payment's intent, on whose behalf a later refund webhook acts (demo/refunds.ts), so the refund
-- shows on the payment's idem trace. Added, not in CREATE TABLE, so an older demo database gets it.
ALTER TABLE ${schema}.payments ADD COLUMN IF NOT EXISTS idempotency_key text;
CREATE INDEX IF NOT EXISTS payments_tenant_customer ON ${schema}.payments (tenant, customer, created_at);
CREATE UNIQUE INDEX IF NOT EXISTS payments_charge ON ${schema}.payments (charge_id);
-- No unique constraint on ledger entries: the inbox is what prevents duplicates, and the soak
-- test must be able to see a duplicate if one ever got through.
CREATE TABLE IF NOT EXISTS ${schema}.ledger (
  id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant      text        NOT NULL,
  customer    text        NOT NULL,
  payment_id  text        NOT NULL,
  charge_id   text,
  kind        text        NOT NULL CHECK (kind IN ('credit', 'reversal')),
  amount      bigint      NOT NULL,
  event_id    text        NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ledger_tenant_customer ON ${schema}.ledger (tenant, customer, id);
-- One row per provider refund, written with its reversal event: a refund is recorded once, by its
-- id, and once per place in its charge's sequence (demo/refunds.ts).
CREATE TABLE IF NOT EXISTS ${schema}.refunds (
  refund_id   text        PRIMARY KEY,
  payment_id  text        NOT NULL,
  charge_id   text        NOT NULL,
  amount      bigint      NOT NULL CHECK (amount > 0),
  sequence    integer     NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  UNIQUE (charge_id, sequence)
);
CREATE TABLE IF NOT EXISTS ${schema}.notifications (
  id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant      text        NOT NULL,
  payment_id  text        NOT NULL,
  channel     text        NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
`;
}
