-- Causation: every record idem writes on behalf of an intent names that intent and the W3C trace
-- context it was written in (src/core/causation.ts), so one intent's timeline can be read across
-- modules and processes (`idem trace`, `createTrace`).
-- `intent` is the intent reference `tenant/operation/key` (each part percent-encoded); a nested
-- intent's own row names its cause in `requests.caused_by`. `traceparent` is W3C Trace Context.
-- Every column is nullable without a default: adding it changes only the catalog (no table
-- rewrite, no scan), and a row written outside any intent or trace stores two NULL bits.
-- Indexes only for the lookups `idem trace` makes, each partial (rows without a cause pay nothing)
-- and a hash index (equality is all a lookup needs; a reference can be longer than a B-tree entry
-- may be).
-- {{schema}} is replaced by the quoted schema name when the migration is applied.

-- A keyed operation started inside another intent (a consumer's or a claimed task's handler, a
-- step's body), and the trace its request came in.
ALTER TABLE {{schema}}.requests
  ADD COLUMN caused_by   text,
  ADD COLUMN traceparent text;
CREATE INDEX requests_caused_by ON {{schema}}.requests USING hash (caused_by)
  WHERE caused_by IS NOT NULL;

-- Steps already name their intent (the key is in their primary key). A call keeps the key it sent
-- downstream, so a provider's record ("which charge is idem_…?") leads back to the intent.
ALTER TABLE {{schema}}.steps
  ADD COLUMN derived_key text,
  ADD COLUMN traceparent text;
CREATE INDEX steps_derived_key ON {{schema}}.steps USING hash (derived_key)
  WHERE derived_key IS NOT NULL;

ALTER TABLE {{schema}}.outbox
  ADD COLUMN intent      text,
  ADD COLUMN traceparent text;
CREATE INDEX outbox_intent ON {{schema}}.outbox USING hash (intent) WHERE intent IS NOT NULL;

-- What a consumer handled, as the message's headers named its cause (another process's intent).
ALTER TABLE {{schema}}.inbox
  ADD COLUMN intent      text,
  ADD COLUMN traceparent text;
CREATE INDEX inbox_intent ON {{schema}}.inbox USING hash (intent) WHERE intent IS NOT NULL;

ALTER TABLE {{schema}}.tasks
  ADD COLUMN intent      text,
  ADD COLUMN traceparent text;
CREATE INDEX tasks_intent ON {{schema}}.tasks USING hash (intent) WHERE intent IS NOT NULL;

-- A saga started inside an intent. Its steps name it through their primary key; their action and
-- compensation keys are derived keys, found by `idem trace --derived-key`.
ALTER TABLE {{schema}}.sagas
  ADD COLUMN intent      text,
  ADD COLUMN traceparent text;
CREATE INDEX sagas_intent ON {{schema}}.sagas USING hash (intent) WHERE intent IS NOT NULL;
CREATE INDEX saga_steps_action_key ON {{schema}}.saga_steps USING hash (action_key);
CREATE INDEX saga_steps_compensation_key ON {{schema}}.saga_steps USING hash (compensation_key)
  WHERE compensation_key IS NOT NULL;
