-- Keyed operations: one row per (tenant, operation, idempotency key).
-- {{schema}} is replaced by the quoted schema name when the migration is applied.

CREATE TABLE {{schema}}.requests (
  tenant_id       text        NOT NULL,
  operation       text        NOT NULL,
  idempotency_key text        NOT NULL,
  -- SHA-256 of the canonical request; the same key with another fingerprint is refused.
  fingerprint     text        NOT NULL,
  state           text        NOT NULL CHECK (state IN ('pending', 'completed', 'failed')),
  -- Fencing counter: raised on every takeover; writes carrying an older value are refused.
  fence           integer     NOT NULL DEFAULT 1,
  -- Lease of a multi-step operation's current holder.
  locked_until    timestamptz,
  -- Name of the last step whose result was recorded.
  recovery_point  text,
  -- The stored result as JSON text (kept as text so a replay returns exactly what was stored),
  -- and an optional binary body (HTTP responses). Both are cleared when expires_at passes.
  result          text,
  body            bytea,
  resource_type   text,
  resource_id     text,
  created_at      timestamptz NOT NULL,
  completed_at    timestamptz,
  -- After expires_at the stored result is gone; until tombstone_until the key still answers
  -- with an "expired" error that carries the resource pointer; after it the key is new again.
  expires_at      timestamptz NOT NULL,
  tombstone_until timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, operation, idempotency_key),
  CHECK (tombstone_until >= expires_at)
) WITH (fillfactor = 85);
-- fillfactor leaves room on each page so that completing a claim is a HOT update: the completing
-- UPDATE changes no indexed column, so PostgreSQL writes no new index entries for it.

-- The sweeper's indexes. Expiry times grow with insertion order, so BRIN indexes find due rows
-- at a fraction of a B-tree's insert cost on the hot path.
CREATE INDEX requests_expires_at ON {{schema}}.requests USING brin (expires_at);
CREATE INDEX requests_tombstone_until ON {{schema}}.requests USING brin (tombstone_until);

-- Recorded results of the steps of a multi-step operation.
CREATE TABLE {{schema}}.steps (
  tenant_id       text        NOT NULL,
  operation       text        NOT NULL,
  idempotency_key text        NOT NULL,
  step            text        NOT NULL,
  result          text        NOT NULL,
  fence           integer     NOT NULL,
  completed_at    timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, operation, idempotency_key, step),
  FOREIGN KEY (tenant_id, operation, idempotency_key)
    REFERENCES {{schema}}.requests (tenant_id, operation, idempotency_key) ON DELETE CASCADE
);
