-- The intent a received webhook acted for (src/core/causation.ts `onBehalfOf`, docs/trace.md). A
-- provider's webhook (Stripe's `charge.refunded`) names no intent of the receiver's; its handler
-- finds the business record it is about and says on whose behalf it acts, and the receipt keeps
-- that intent's reference as it finishes, so the intent's trace shows the receipt and a reverse
-- lookup from the delivery id finds the intent.
-- A nullable column without a default (a catalog change only); a partial hash index for the
-- lookups `idem trace` makes. {{schema}} is replaced by the quoted schema name when the migration
-- is applied.
-- Depends on 0012_webhook_causation.sql.

ALTER TABLE {{schema}}.webhook_receipts
  ADD COLUMN acted_for text;
CREATE INDEX webhook_receipts_acted_for ON {{schema}}.webhook_receipts USING hash (acted_for)
  WHERE acted_for IS NOT NULL;
