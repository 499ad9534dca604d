/** The live counters: one statement, pushed to open pages every few seconds. */
import { ageMs, num, type ConsoleDatabase } from '../database.js';

export interface ConsoleSummary {
  at: string;
  requests: { pending: number; stuck: number };
  outbox: { backlog: number; lagMs: number | null; retrying: number; dead: number };
  inbox: { dead: number };
  receipts: {
    backlog: number;
    lagMs: number | null;
    dead: number;
    superseded: number;
    stuck: number;
    /** Sequence entities parked on a gap. */
    parked: number;
  };
  deliveries: { pending: number; failed: number };
  tasks: { ready: number; claimed: number; stuck: number; dead: number };
  sagas: { running: number; stuck: number; stalled: number };
}

/**
 * Counts that matter to an operator. The outbox, receipts, tasks and sagas counts read partial
 * indexes of unfinished rows; the requests and inbox counts scan their tables (see docs/operations/console.md
 * for the measured cost and the partial indexes that would make them cheap).
 */
export async function readSummary(db: ConsoleDatabase): Promise<ConsoleSummary> {
  const now = db.clock.now();
  const s = db.s;
  const { rows } = await db.read((tx) =>
    tx.query(
      `SELECT
        (SELECT count(*) FROM ${s}.requests WHERE state = 'pending') AS requests_pending,
        (SELECT count(*) FROM ${s}.requests
          WHERE state = 'pending' AND (locked_until IS NULL OR locked_until <= $1)) AS requests_stuck,
        (SELECT count(*) FROM ${s}.outbox WHERE published_at IS NULL AND dead_at IS NULL) AS outbox_backlog,
        (SELECT min(created_at) FROM ${s}.outbox WHERE published_at IS NULL AND dead_at IS NULL) AS outbox_oldest,
        (SELECT count(*) FROM ${s}.outbox
          WHERE published_at IS NULL AND dead_at IS NULL AND attempts > 0) AS outbox_retrying,
        (SELECT count(*) FROM ${s}.outbox WHERE dead_at IS NOT NULL AND published_at IS NULL) AS outbox_dead,
        (SELECT count(*) FROM ${s}.inbox WHERE state = 'dead') AS inbox_dead,
        (SELECT count(*) FROM ${s}.webhook_receipts WHERE state IN ('pending', 'processing')) AS receipts_backlog,
        (SELECT min(received_at) FROM ${s}.webhook_receipts
          WHERE state IN ('pending', 'processing')) AS receipts_oldest,
        (SELECT count(*) FROM ${s}.webhook_receipts WHERE state = 'dead') AS receipts_dead,
        (SELECT count(*) FROM ${s}.webhook_receipts WHERE state = 'superseded') AS receipts_superseded,
        (SELECT count(*) FROM ${s}.webhook_entity_versions WHERE parked_at IS NOT NULL) AS entities_parked,
        (SELECT count(*) FROM ${s}.webhook_receipts
          WHERE state = 'processing' AND next_attempt_at <= $1) AS receipts_stuck,
        (SELECT count(*) FROM ${s}.webhook_deliveries WHERE state IN ('pending', 'delivering')) AS deliveries_pending,
        (SELECT count(*) FROM ${s}.webhook_deliveries WHERE state = 'failed') AS deliveries_failed,
        (SELECT count(*) FROM ${s}.tasks WHERE state = 'ready') AS tasks_ready,
        (SELECT count(*) FROM ${s}.tasks WHERE state = 'claimed') AS tasks_claimed,
        (SELECT count(*) FROM ${s}.tasks WHERE state = 'claimed' AND visible_at <= $1) AS tasks_stuck,
        (SELECT count(*) FROM ${s}.tasks WHERE state = 'dead') AS tasks_dead,
        (SELECT count(*) FROM ${s}.sagas WHERE status IN ('running', 'compensating')) AS sagas_running,
        (SELECT count(*) FROM ${s}.sagas WHERE status = 'stuck') AS sagas_stuck,
        (SELECT count(*) FROM ${s}.sagas WHERE status IN ('running', 'compensating')
          AND (locked_until IS NULL OR locked_until <= $1)) AS sagas_stalled`,
      [new Date(now)],
    ),
  );
  const r = rows[0] ?? {};
  return {
    at: new Date(now).toISOString(),
    requests: { pending: num(r.requests_pending), stuck: num(r.requests_stuck) },
    outbox: {
      backlog: num(r.outbox_backlog),
      lagMs: ageMs(r.outbox_oldest, now),
      retrying: num(r.outbox_retrying),
      dead: num(r.outbox_dead),
    },
    inbox: { dead: num(r.inbox_dead) },
    receipts: {
      backlog: num(r.receipts_backlog),
      lagMs: ageMs(r.receipts_oldest, now),
      dead: num(r.receipts_dead),
      superseded: num(r.receipts_superseded),
      parked: num(r.entities_parked),
      stuck: num(r.receipts_stuck),
    },
    deliveries: { pending: num(r.deliveries_pending), failed: num(r.deliveries_failed) },
    tasks: {
      ready: num(r.tasks_ready),
      claimed: num(r.tasks_claimed),
      stuck: num(r.tasks_stuck),
      dead: num(r.tasks_dead),
    },
    sagas: { running: num(r.sagas_running), stuck: num(r.sagas_stuck), stalled: num(r.sagas_stalled) },
  };
}
