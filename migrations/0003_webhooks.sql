-- Webhooks: receipts of incoming deliveries and the entity versions their handlers applied; the
-- sender's endpoints, messages, per-endpoint deliveries and every delivery attempt.
-- {{schema}} is replaced by the quoted schema name when the migration is applied.
-- Depends on nothing but the schema itself.

-- One row per verified incoming delivery. The primary key is the dedupe decision: a redelivery
-- with the same (source, delivery_id) hits ON CONFLICT and does no new work.
CREATE TABLE {{schema}}.webhook_receipts (
  -- The receiver's name for the sender, e.g. 'github', 'stripe', 'billing'.
  source          text        NOT NULL,
  -- Standard Webhooks: webhook-id. GitHub: '<X-GitHub-Hook-ID>:<X-GitHub-Delivery>'.
  -- Stripe: the event id from the verified body.
  delivery_id     text        NOT NULL,
  -- NULL when the sender did not name one; such receipts are stored and acknowledged.
  event_type      text,
  -- The chosen headers (never signature headers), lower-case names.
  headers         jsonb       NOT NULL DEFAULT '{}',
  -- The exact bytes that were verified.
  body            bytea       NOT NULL,
  received_at     timestamptz NOT NULL,
  -- pending: waiting for a worker; processing: claimed (next_attempt_at is the lease's end);
  -- applied: the handler committed; stale: older than the entity's applied version, never applied;
  -- unhandled: no handler for its type when processed (redrive once one exists);
  -- dead: attempts exhausted or a permanent error (redrive to try again).
  state           text        NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'processing', 'applied', 'stale', 'unhandled', 'dead')),
  -- Raised by every claim; a worker's writes carry the value it claimed (fencing).
  attempts        integer     NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  last_error      text,
  -- What the handler declared, recorded when processed.
  entity_scope    text,
  entity_key      text,
  entity_version  numeric,
  processed_at    timestamptz,
  -- received_at + the source's retention: how long a redelivery is still recognised.
  expires_at      timestamptz NOT NULL,
  PRIMARY KEY (source, delivery_id)
);

-- Workers claim from this index: due pending receipts and processing ones whose lease ended.
CREATE INDEX webhook_receipts_due ON {{schema}}.webhook_receipts (next_attempt_at)
  WHERE state IN ('pending', 'processing');
-- The sweeper deletes finished receipts past their retention. Dead receipts are never swept.
CREATE INDEX webhook_receipts_expires_at ON {{schema}}.webhook_receipts (expires_at)
  WHERE state IN ('applied', 'stale', 'unhandled');
CREATE INDEX webhook_receipts_dead ON {{schema}}.webhook_receipts (source, received_at)
  WHERE state = 'dead';

-- The last version applied per entity. Updated in the same transaction as the handler's writes,
-- so an older event can never move state backwards. Kept after receipts are swept: a very late
-- replay of an old event is still recognised as stale.
CREATE TABLE {{schema}}.webhook_entity_versions (
  scope           text        NOT NULL,
  entity_key      text        NOT NULL,
  version         numeric     NOT NULL,
  source          text        NOT NULL,
  delivery_id     text        NOT NULL,
  applied_at      timestamptz NOT NULL,
  PRIMARY KEY (scope, entity_key)
);

-- Sender: subscriber endpoints.
CREATE TABLE {{schema}}.webhook_endpoints (
  id              text        PRIMARY KEY,
  url             text        NOT NULL,
  -- Signing secrets: 'whsec_…' (v1, HMAC-SHA256) or 'whsk_…' (v1a, ed25519). Every one signs
  -- each attempt, so a secret can be rotated without downtime.
  secrets         text[]      NOT NULL CHECK (cardinality(secrets) > 0),
  -- NULL: every event type.
  event_types     text[],
  enabled         boolean     NOT NULL DEFAULT true,
  disabled_reason text,
  disabled_at     timestamptz,
  created_at      timestamptz NOT NULL
);

-- Sender: one row per event to deliver. The id is the webhook-id on every attempt.
CREATE TABLE {{schema}}.webhook_messages (
  id              text        PRIMARY KEY,
  event_type      text        NOT NULL,
  -- The exact bytes sent on every attempt.
  payload         bytea       NOT NULL,
  content_type    text        NOT NULL DEFAULT 'application/json',
  created_at      timestamptz NOT NULL
);

-- Sender: one row per (message, endpoint), with its retry state.
CREATE TABLE {{schema}}.webhook_deliveries (
  message_id      text        NOT NULL REFERENCES {{schema}}.webhook_messages (id) ON DELETE CASCADE,
  endpoint_id     text        NOT NULL REFERENCES {{schema}}.webhook_endpoints (id) ON DELETE CASCADE,
  -- pending → delivering (claimed; next_attempt_at is the lease's end) → delivered | failed
  -- (schedule exhausted) | cancelled (the endpoint was disabled, e.g. after 410 Gone).
  state           text        NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'delivering', 'delivered', 'failed', 'cancelled')),
  attempts        integer     NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  last_status     integer,
  last_error      text,
  created_at      timestamptz NOT NULL,
  delivered_at    timestamptz,
  PRIMARY KEY (message_id, endpoint_id)
);

CREATE INDEX webhook_deliveries_due ON {{schema}}.webhook_deliveries (next_attempt_at)
  WHERE state IN ('pending', 'delivering');
CREATE INDEX webhook_deliveries_endpoint ON {{schema}}.webhook_deliveries (endpoint_id, state);

-- Sender: every HTTP attempt, with its answer and latency.
CREATE TABLE {{schema}}.webhook_delivery_attempts (
  id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  message_id      text        NOT NULL,
  endpoint_id     text        NOT NULL,
  attempt         integer     NOT NULL,
  started_at      timestamptz NOT NULL,
  -- The HTTP status; NULL when no answer came (network error, timeout).
  status          integer,
  latency_ms      double precision NOT NULL,
  -- delivered | retry | failed (schedule exhausted) | gone (410: endpoint disabled)
  outcome         text        NOT NULL CHECK (outcome IN ('delivered', 'retry', 'failed', 'gone')),
  error           text,
  -- The delay the endpoint asked for with Retry-After, when it did.
  retry_after_ms  bigint,
  FOREIGN KEY (message_id, endpoint_id)
    REFERENCES {{schema}}.webhook_deliveries (message_id, endpoint_id) ON DELETE CASCADE
);

CREATE INDEX webhook_delivery_attempts_delivery
  ON {{schema}}.webhook_delivery_attempts (message_id, endpoint_id, attempt);
