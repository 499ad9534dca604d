-- Finished sagas (completed or compensated) are kept for a retention window, then swept with
-- their steps (ON DELETE CASCADE). The sweeper reads them by finish time through this index;
-- it is partial, so running sagas never pay for it.
CREATE INDEX sagas_finished ON {{schema}}.sagas (finished_at)
  WHERE status IN ('completed', 'compensated');
