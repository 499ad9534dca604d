-- Step results keep their types across a resume (src/steps/result-codec.ts). Every stored step
-- result keeps its text column as the plain-JSON part, what operators read (`JSON.stringify` of a
-- plain value; an ISO string for a Date, a decimal string for a bigint, base64 for bytes); the
-- new nullable *_meta column beside it holds the type annotations (superjson's `meta`, as JSON
-- text) for what plain JSON cannot carry. NULL means plain JSON: every row written before this
-- migration reads exactly as it did.
-- Adding a nullable column without a default changes only the catalog: no table rewrite, no scan.
-- {{schema}} is replaced by the quoted schema name when the migration is applied.

-- Multi-step operations (`idem.steps`, HTTP steps mode): local steps and calls.
ALTER TABLE {{schema}}.steps ADD COLUMN result_meta text;

-- Sagas: each action's and compensation's result, and the saga's own result (by default the
-- steps' results, so it carries their types too).
ALTER TABLE {{schema}}.saga_steps
  ADD COLUMN result_meta text,
  ADD COLUMN compensation_result_meta text;
ALTER TABLE {{schema}}.sagas ADD COLUMN result_meta text;
