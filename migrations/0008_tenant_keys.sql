-- Tenant keys: every table that holds per-tenant data carries the tenant in its primary key and
-- unique constraints, so the schema can be distributed on `tenant_id` (Citus and its kind require
-- the distribution column in every unique constraint) and every hot statement can name the one
-- tenant it touches. `requests`, `steps`, `sagas`, `saga_steps`, `tasks` and `task_keys` already
-- had the column; `requests`, `steps`, `sagas`, `saga_steps` and `task_keys` already led with it.
--
-- The new columns default to '' (the default tenant, a value no tenant name can take: names are
-- 1–200 characters): rows written before this migration, and by code that never names a tenant,
-- belong to it, and every API that took no tenant keeps working unchanged.
--
-- Adding a column with a constant default is instant; rebuilding a primary key reads the table and
-- holds its lock meanwhile. Tables that outlive a short window (inbox, receipts) can be large: run
-- this migration when a pause of the time it takes to index them is acceptable.
-- {{schema}} is replaced by the quoted schema name when the migration is applied.
-- Depends on 0002_messaging.sql, 0003_webhooks.sql, 0004_claims_workflow.sql, 0007_webhook_ordering.sql.

-- Inbox: (tenant, consumer, message id).
ALTER TABLE {{schema}}.inbox ADD COLUMN tenant_id text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.inbox DROP CONSTRAINT inbox_pkey,
  ADD PRIMARY KEY (tenant_id, consumer, message_id);

-- Outbox: (tenant, id). An ordering key now belongs to one tenant: (tenant, topic, key).
ALTER TABLE {{schema}}.outbox ADD COLUMN tenant_id text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.outbox DROP CONSTRAINT outbox_pkey, ADD PRIMARY KEY (tenant_id, id);
DROP INDEX {{schema}}.outbox_pending_key;
CREATE INDEX outbox_pending_key ON {{schema}}.outbox (tenant_id, aggregatetype, aggregateid, seq)
  WHERE published_at IS NULL;
-- The scan of a dispatcher scoped to tenants (`tenants` option): one tenant's due events.
CREATE INDEX outbox_pending_due_tenant ON {{schema}}.outbox (tenant_id, available_at)
  WHERE published_at IS NULL;

-- Webhook receipts: (tenant, source, delivery id). A source's tenant is set on the receiver.
ALTER TABLE {{schema}}.webhook_receipts ADD COLUMN tenant_id text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.webhook_receipts DROP CONSTRAINT webhook_receipts_pkey,
  ADD PRIMARY KEY (tenant_id, source, delivery_id);
CREATE INDEX webhook_receipts_due_tenant ON {{schema}}.webhook_receipts (tenant_id, next_attempt_at)
  WHERE state IN ('pending', 'processing', 'waiting');
DROP INDEX {{schema}}.webhook_receipts_waiting;
CREATE INDEX webhook_receipts_waiting
  ON {{schema}}.webhook_receipts (tenant_id, entity_scope, entity_key, entity_version)
  WHERE state = 'waiting';

-- Entities of order-aware handlers belong to the tenant of the receipts that name them.
ALTER TABLE {{schema}}.webhook_entity_versions ADD COLUMN tenant_id text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.webhook_entity_versions DROP CONSTRAINT webhook_entity_versions_pkey,
  ADD PRIMARY KEY (tenant_id, scope, entity_key);
ALTER TABLE {{schema}}.webhook_entity_skips ADD COLUMN tenant_id text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.webhook_entity_skips DROP CONSTRAINT webhook_entity_skips_pkey,
  ADD PRIMARY KEY (tenant_id, scope, entity_key, from_version);

-- Webhook sender: a tenant's endpoints receive that tenant's messages only. The foreign keys are
-- dropped and made again with the tenant, since they must reference the new primary keys.
ALTER TABLE {{schema}}.webhook_delivery_attempts
  DROP CONSTRAINT webhook_delivery_attempts_message_id_endpoint_id_fkey;
ALTER TABLE {{schema}}.webhook_deliveries
  DROP CONSTRAINT webhook_deliveries_message_id_fkey,
  DROP CONSTRAINT webhook_deliveries_endpoint_id_fkey;

ALTER TABLE {{schema}}.webhook_endpoints ADD COLUMN tenant_id text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.webhook_endpoints DROP CONSTRAINT webhook_endpoints_pkey,
  ADD PRIMARY KEY (tenant_id, id);
ALTER TABLE {{schema}}.webhook_messages ADD COLUMN tenant_id text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.webhook_messages DROP CONSTRAINT webhook_messages_pkey,
  ADD PRIMARY KEY (tenant_id, id);

ALTER TABLE {{schema}}.webhook_deliveries ADD COLUMN tenant_id text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.webhook_deliveries DROP CONSTRAINT webhook_deliveries_pkey,
  ADD PRIMARY KEY (tenant_id, message_id, endpoint_id),
  ADD FOREIGN KEY (tenant_id, message_id)
    REFERENCES {{schema}}.webhook_messages (tenant_id, id) ON DELETE CASCADE,
  ADD FOREIGN KEY (tenant_id, endpoint_id)
    REFERENCES {{schema}}.webhook_endpoints (tenant_id, id) ON DELETE CASCADE;
CREATE INDEX webhook_deliveries_due_tenant ON {{schema}}.webhook_deliveries (tenant_id, next_attempt_at)
  WHERE state IN ('pending', 'delivering');
DROP INDEX {{schema}}.webhook_deliveries_endpoint;
CREATE INDEX webhook_deliveries_endpoint ON {{schema}}.webhook_deliveries (tenant_id, endpoint_id, state);

ALTER TABLE {{schema}}.webhook_delivery_attempts ADD COLUMN tenant_id text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.webhook_delivery_attempts DROP CONSTRAINT webhook_delivery_attempts_pkey,
  ADD PRIMARY KEY (tenant_id, id),
  ADD FOREIGN KEY (tenant_id, message_id, endpoint_id)
    REFERENCES {{schema}}.webhook_deliveries (tenant_id, message_id, endpoint_id) ON DELETE CASCADE;
DROP INDEX {{schema}}.webhook_delivery_attempts_delivery;
CREATE INDEX webhook_delivery_attempts_delivery
  ON {{schema}}.webhook_delivery_attempts (tenant_id, message_id, endpoint_id, attempt);

-- Claims: tasks had the tenant but not in the key. task_keys already led with it.
ALTER TABLE {{schema}}.tasks DROP CONSTRAINT tasks_pkey, ADD PRIMARY KEY (tenant_id, id);
-- The claim of a worker scoped to tenants: one tenant's claimable tasks of a queue.
CREATE INDEX tasks_claimable_tenant ON {{schema}}.tasks (tenant_id, queue, visible_at, id)
  WHERE state IN ('ready', 'claimed');
