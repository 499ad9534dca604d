-- Defined operations (`idem.define`): while one is pending, its input is kept here, so that a
-- completer can drive it to its end after its holder died (a crash, a deploy, a client that gave
-- up), without waiting for a client's retry that may never come. The row goes when the operation
-- completes or fails for good (in the same statement), or with its key (ON DELETE CASCADE).
-- Only pending defined operations live here, so the completer's scan stays small whatever the
-- size of `requests`, and `requests` gets no index that would slow its hot path.
-- {{schema}} is replaced by the quoted schema name when the migration is applied.
CREATE TABLE {{schema}}.intents (
  tenant_id       text        NOT NULL,
  operation       text        NOT NULL,
  idempotency_key text        NOT NULL,
  -- The input the operation's body is called with: plain JSON, and type annotations for what JSON
  -- cannot carry (as step results, migration 0009).
  input           text        NOT NULL,
  input_meta      text,
  -- Resumes by a completer so far, and the last one's failure.
  attempts        integer     NOT NULL DEFAULT 0,
  last_error      text,
  -- Not before: the holder's lease end at first, then the completer's backoff.
  next_attempt_at timestamptz NOT NULL,
  -- An operator's decision for an operation that cannot complete: run its compensation, or end it
  -- failed. The completer carries it out on its next round (it has the code; the CLI does not).
  give_up         text        CHECK (give_up IN ('compensate', 'fail')),
  created_at      timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, operation, idempotency_key),
  FOREIGN KEY (tenant_id, operation, idempotency_key)
    REFERENCES {{schema}}.requests (tenant_id, operation, idempotency_key) ON DELETE CASCADE
);
CREATE INDEX intents_due ON {{schema}}.intents (next_attempt_at);
