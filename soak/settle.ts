/**
 * Quiescence: after the chaos stops and every client has its answer, the background work must
 * drain by itself — outbox published, events consumed, webhooks processed, receipt tasks done.
 * Bounded: after `timeoutMs` the verdict runs on whatever state there is, and says what was left.
 */
import type pg from 'pg';
import type { Intent } from './clients.js';
import { sleep } from './random.js';
import { readState, type SoakState } from './state.js';

export interface Backlog {
  unpublished: number;
  unconsumed: number;
  webhooksOpen: number;
  tasksOpen: number;
  creditsMissing: number;
  reversalsMissing: number;
}

export function backlog(state: SoakState, intents: readonly Intent[]): Backlog {
  const consumed = new Set(state.ledger.map((e) => e.event_id));
  const credits = state.ledger.filter((e) => e.kind === 'credit').length;
  const reversals = state.ledger.filter((e) => e.kind === 'reversal').length;
  const expectedCredits = intents.filter((i) => i.finalStatus === 201).length;
  const expectedReversals = intents.reduce((n, i) => n + i.refunds.length, 0);
  return {
    unpublished: state.outbox.filter((e) => !e.published).length,
    unconsumed: state.outbox.filter((e) => e.published && !consumed.has(e.id)).length,
    // Waiting: a refund webhook that arrived before an earlier refund of its charge.
    webhooksOpen:
      (state.receipts.get('pending') ?? 0) +
      (state.receipts.get('processing') ?? 0) +
      (state.receipts.get('waiting') ?? 0),
    tasksOpen: (state.tasks.get('ready') ?? 0) + (state.tasks.get('claimed') ?? 0),
    creditsMissing: Math.max(0, expectedCredits - credits),
    reversalsMissing: Math.max(0, expectedReversals - reversals),
  };
}

export async function settle(
  pool: pg.Pool,
  schema: string,
  providerUrl: string,
  intents: readonly Intent[],
  timeoutMs: number,
  say: (line: string) => void,
): Promise<{ state: SoakState; settledMs: number; backlog: Backlog }> {
  const started = Date.now();
  let lastReport = 0;
  for (;;) {
    const state = await readState(pool, schema, providerUrl);
    const left = backlog(state, intents);
    const open = (Object.values(left) as number[]).reduce((a, b) => a + b, 0);
    if (open === 0 || Date.now() - started > timeoutMs) {
      return { state, settledMs: Date.now() - started, backlog: left };
    }
    if (Date.now() - lastReport > 5000) {
      lastReport = Date.now();
      say(`settling: ${JSON.stringify(left)}`);
    }
    await sleep(1000);
  }
}
