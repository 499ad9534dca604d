-- Causation of webhooks (src/core/causation.ts, docs/trace.md), as 0011 records it for the other
-- modules. A message the sender enqueued inside an intent names that intent and the W3C trace
-- context it was enqueued in; every attempt of each of its deliveries sends both as headers
-- (`traceparent`, `idem-intent`). A receipt keeps the `traceparent` and `idem-intent` it arrived
-- with; the keyed operations its handler starts name the receipt in `requests.caused_by`
-- (`webhook:<tenant>:<source>:<delivery id>`, each part percent-encoded).
-- Nullable columns without a default (a catalog change only); partial hash indexes for the lookups
-- `idem trace` makes. {{schema}} is replaced by the quoted schema name when the migration is applied.
-- Depends on 0003_webhooks.sql, 0008_tenant_keys.sql.

ALTER TABLE {{schema}}.webhook_messages
  ADD COLUMN intent      text,
  ADD COLUMN traceparent text;
CREATE INDEX webhook_messages_intent ON {{schema}}.webhook_messages USING hash (intent)
  WHERE intent IS NOT NULL;

ALTER TABLE {{schema}}.webhook_receipts
  ADD COLUMN intent      text,
  ADD COLUMN traceparent text;
CREATE INDEX webhook_receipts_intent ON {{schema}}.webhook_receipts USING hash (intent)
  WHERE intent IS NOT NULL;
