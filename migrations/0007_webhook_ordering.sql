-- Webhooks: order-aware processing in two models, chosen per event type by the handler:
--   state    (latest wins): an older version is superseded, the same version is a duplicate;
--   sequence (every version, in order): the next version is applied+1; a later one waits for the
--            missing one, then its entity is parked (visible) until the gap is filled or skipped.
-- One entity is handled by one worker at a time: its row in webhook_entity_versions is locked with
-- SKIP LOCKED, and a receipt whose entity is busy waits instead of blocking its worker.
-- {{schema}} is replaced by the quoted schema name when the migration is applied.
-- Depends on 0003_webhooks.sql.

-- Receipt states. `stale` is renamed `superseded`; new ones:
--   waiting:   an entity event that waits for its turn: its entity was busy with another worker,
--              or (sequence) an earlier version is not applied yet. next_attempt_at is when it is
--              looked at again ('infinity' while its entity is parked; filling or skipping the gap
--              wakes it).
--   duplicate: its entity and version were already handled under another delivery id.
ALTER TABLE {{schema}}.webhook_receipts DROP CONSTRAINT webhook_receipts_state_check;
UPDATE {{schema}}.webhook_receipts SET state = 'superseded' WHERE state = 'stale';
ALTER TABLE {{schema}}.webhook_receipts ADD CONSTRAINT webhook_receipts_state_check
  CHECK (state IN ('pending', 'processing', 'waiting', 'applied', 'superseded', 'duplicate',
                   'unhandled', 'dead'));

ALTER TABLE {{schema}}.webhook_receipts
  -- Claims that only put the receipt back to wait (entity busy, earlier version missing). They
  -- raise `attempts` like every claim (the fence) but are not attempts of the handler:
  -- attempts - deferrals is what maxAttempts counts and what the handler sees.
  ADD COLUMN deferrals     integer NOT NULL DEFAULT 0,
  -- When a sequence event was first seen waiting for an earlier version (the gap's clock).
  ADD COLUMN waiting_since timestamptz;

-- Workers claim waiting receipts too, once their time has come.
DROP INDEX {{schema}}.webhook_receipts_due;
CREATE INDEX webhook_receipts_due ON {{schema}}.webhook_receipts (next_attempt_at)
  WHERE state IN ('pending', 'processing', 'waiting');
DROP INDEX {{schema}}.webhook_receipts_expires_at;
CREATE INDEX webhook_receipts_expires_at ON {{schema}}.webhook_receipts (expires_at)
  WHERE state IN ('applied', 'superseded', 'duplicate', 'unhandled');
-- Applying a version wakes the receipts of the same entity that wait for it.
CREATE INDEX webhook_receipts_waiting
  ON {{schema}}.webhook_receipts (entity_scope, entity_key, entity_version)
  WHERE state = 'waiting';

-- An entity's row exists before its first version is applied (version NULL): it is the lock that
-- serialises the entity's handlers, and it must exist to be locked.
ALTER TABLE {{schema}}.webhook_entity_versions
  ALTER COLUMN version DROP NOT NULL,
  ALTER COLUMN source DROP NOT NULL,
  ALTER COLUMN delivery_id DROP NOT NULL,
  ALTER COLUMN applied_at DROP NOT NULL,
  -- The model the entity's handlers declared. Rows from before this migration are `state`.
  ADD COLUMN ordering      text NOT NULL DEFAULT 'state' CHECK (ordering IN ('state', 'sequence')),
  -- Set when a later version waited longer than its gap timeout for a missing one; cleared when
  -- the entity moves forward again (the gap filled, or an operator skipped it).
  ADD COLUMN parked_at     timestamptz,
  ADD COLUMN parked_reason text,
  -- The version a parked entity waits for (its applied version + 1, or its first version).
  ADD COLUMN missing_version numeric;

CREATE INDEX webhook_entity_versions_parked ON {{schema}}.webhook_entity_versions (parked_at)
  WHERE parked_at IS NOT NULL;

-- Versions of a sequence entity that an operator skipped (never applied). Kept, so that a late
-- arrival of a skipped version is a visible dead letter rather than a silent duplicate.
CREATE TABLE {{schema}}.webhook_entity_skips (
  scope           text        NOT NULL,
  entity_key      text        NOT NULL,
  from_version    numeric     NOT NULL,
  through_version numeric     NOT NULL,
  skipped_at      timestamptz NOT NULL,
  reason          text,
  PRIMARY KEY (scope, entity_key, from_version)
);
