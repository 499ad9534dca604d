/**
 * What the trace suites start from: a schema, and idem's parts on it sharing one clock moved by
 * hand, so each phase of a scenario has its own instant and a timeline's time order is its causal
 * order.
 */
import { createIdem } from 'idem';
import { createClaims } from 'idem/claims';
import { createInbox } from 'idem/inbox';
import { createOutbox } from 'idem/outbox';
import { fromPg } from 'idem/pg';
import { createManualClock } from 'idem/testing';
import { createTestSchema } from './database.js';

/** The schema (`db`), its `sql`, the hand-moved `clock`, and idem, the outbox, inbox and claims on them. */
export async function createTraceBed(poolSize = 6) {
  const db = await createTestSchema({ poolSize });
  const sql = fromPg(db.pool);
  const { schema } = db;
  const clock = createManualClock({ startMs: Date.parse('2030-01-01T00:00:00Z') });
  return {
    db,
    sql,
    schema,
    clock,
    idem: createIdem({ sql, schema, clock }),
    outbox: createOutbox({ sql, schema, clock }),
    inbox: createInbox({ sql, schema, clock }),
    claims: createClaims({ sql, schema, clock }),
  };
}
