-- Messaging: the consumers' inbox and the producers' outbox.
-- {{schema}} is replaced by the quoted schema name when the migration is applied.

-- One row per (consumer, message id) a consumer has handled. The row is inserted in the same
-- transaction as the handler's writes, so "processed" and "effect" commit or vanish together.
CREATE TABLE {{schema}}.inbox (
  consumer     text        NOT NULL,
  message_id   text        NOT NULL,
  -- processed: the handler's transaction committed. dead: the consumer gave up after its
  -- attempts; a later delivery of the same id (a redrive) runs the handler again.
  state        text        NOT NULL CHECK (state IN ('processed', 'dead')),
  -- Deliveries that ended in a failure (dead rows) and duplicates that were acked without
  -- running the handler (processed rows).
  attempts     integer     NOT NULL DEFAULT 1,
  duplicates   integer     NOT NULL DEFAULT 0,
  last_error   text,
  -- Dead rows keep the message so an operator can inspect or replay it.
  origin       text,
  payload      bytea,
  headers      jsonb,
  processed_at timestamptz NOT NULL,
  -- The row is swept after this time; until then a redelivery of the id is a duplicate.
  expires_at   timestamptz NOT NULL,
  PRIMARY KEY (consumer, message_id)
);

CREATE INDEX inbox_expires_at ON {{schema}}.inbox (expires_at);

-- Events written in the producer's transaction and published by the dispatcher.
-- The first five columns use the names Debezium's Outbox Event Router reads by default
-- (id, aggregatetype, aggregateid, type, payload), so switching to Debezium + Kafka needs no
-- producer change: aggregatetype is idem's topic, aggregateid the ordering key.
CREATE TABLE {{schema}}.outbox (
  id            uuid        PRIMARY KEY,
  aggregatetype text        NOT NULL,
  aggregateid   text        NOT NULL,
  type          text        NOT NULL,
  payload       jsonb       NOT NULL,
  headers       jsonb       NOT NULL DEFAULT '{}',
  -- Insertion order. Events of one key are published in this order; a UUIDv7 is only ordered
  -- within the process that made it, this is ordered across all producers.
  seq           bigint      GENERATED ALWAYS AS IDENTITY,
  created_at    timestamptz NOT NULL,
  -- Not before this time: backoff after a failure; 'infinity' while the key is parked behind
  -- a dead event (the dead event itself and every later event of its key).
  available_at  timestamptz NOT NULL,
  attempts      integer     NOT NULL DEFAULT 0,
  last_error    text,
  published_at  timestamptz,
  dead_at       timestamptz
);

-- The dispatcher's scan: pending events that are due, oldest first.
CREATE INDEX outbox_pending_due ON {{schema}}.outbox (available_at) WHERE published_at IS NULL;
-- The head of each key: its earliest pending event.
CREATE INDEX outbox_pending_key ON {{schema}}.outbox (aggregatetype, aggregateid, seq)
  WHERE published_at IS NULL;
-- Cleanup of published rows past their retention, in small batches.
CREATE INDEX outbox_published_at ON {{schema}}.outbox (published_at) WHERE published_at IS NOT NULL;
-- Redrive and stats of parked events.
CREATE INDEX outbox_dead ON {{schema}}.outbox (dead_at) WHERE dead_at IS NOT NULL;
