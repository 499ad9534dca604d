-- Multi-step operations call the outside world between short transactions (see src/steps/), and a
-- deterministic failure ends the operation instead of leaving its key pending.
-- {{schema}} is replaced by the quoted schema name when the migration is applied.

-- A step is either local (a short transaction: its writes commit with its result) or a call to
-- the outside world (no transaction while it runs). A call's row is written, without a result,
-- in a committed transaction *before* the call runs: from then on operators (and the failure rule
-- below) know an external effect may exist. Its result and completed_at are filled in after.
ALTER TABLE {{schema}}.steps
  ADD COLUMN kind text NOT NULL DEFAULT 'local',
  ADD COLUMN started_at timestamptz,
  ALTER COLUMN result DROP NOT NULL,
  ALTER COLUMN completed_at DROP NOT NULL;
-- NOT VALID: existing rows all carry the default, so the check need not scan the table (which
-- would hold an exclusive lock for the scan); every new or updated row is checked.
ALTER TABLE {{schema}}.steps
  ADD CONSTRAINT steps_kind_check CHECK (kind IN ('local', 'call')) NOT VALID;

-- A multi-step operation that failed for good (a non-retryable error after it had committed a
-- step or started an external call) ends with state 'failed' and the error here, with the step it
-- failed at; every retry of its key gets that failure back instead of running again. A business
-- refusal (`refused()`) is also 'failed', with error NULL and its stored result.
ALTER TABLE {{schema}}.requests
  ADD COLUMN error text,
  ADD COLUMN error_step text;
