/**
 * The verdict on the payments demo after a fault, read directly in PostgreSQL (never through the
 * faulty link) and from the in-process fake provider: every intent's effects counted once.
 * `settle` first waits, bounded, for the background work to drain (outbox published, ledger
 * credited, receipt tasks done, no key pending), then `verdict` reads one snapshot.
 */
import type pg from 'pg';
import type { FakeCardProvider } from '../../../demo/provider.js';
import type { ClientLog, Intent } from './payment-clients.js';

export interface Verdict {
  intents: number;
  answered201: number;
  /** Intents with no final answer, or a final answer other than 201. */
  unanswered: { key: string; status: number | undefined; body: string | undefined; seen: string }[];
  duplicatePayments: { customer: string; ids: string[] }[];
  duplicateCharges: { customer: string; charges: number }[];
  duplicateCredits: { paymentId: string; credits: number }[];
  duplicateNotifications: { paymentId: string; notifications: number }[];
  /** Answered 201, but missing (or different) in the database. */
  missingPayments: { key: string; paymentId: string | undefined; found: string }[];
  /** Answered 201, but not credited in the ledger. */
  missingCredits: { key: string; paymentId: string }[];
  /** Keys left pending (with their recovery point) or failed (with the stored error). */
  pendingKeys: { key: string; recoveryPoint: string | null; lockedUntil: Date | null }[];
  failedKeys: { key: string; error: string | null; errorStep: string | null }[];
  outbox: { unpublished: number; dead: number; lastErrors: string[] };
  tasksOpen: number;
  /** Provider calls (retries included) and charges. */
  providerCalls: number;
  providerCharges: number;
  settledMs: number;
  /** What was still open when the settle bound ran out (empty when settled). */
  backlog: string[];
  violations: ClientLog['violations'];
  /** Attempts not answered within the client's own timeout. */
  held: ClientLog['held'];
}

interface Snapshot {
  payments: { id: string; customer: string; status: string }[];
  credits: { payment_id: string; n: number }[];
  notifications: { payment_id: string; n: number }[];
  requests: {
    key: string;
    state: string;
    recovery_point: string | null;
    locked_until: Date | null;
    error: string | null;
    error_step: string | null;
  }[];
  outbox: { unpublished: number; dead: number; last_errors: string[] | null };
  tasksOpen: number;
}

async function snapshot(pool: pg.Pool, schema: string): Promise<Snapshot> {
  const s = `"${schema}"`;
  const d = `"${schema}_demo"`;
  const client = await pool.connect();
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const q = async <T extends pg.QueryResultRow>(text: string) => (await client.query<T>(text)).rows;
    const payments = await q<Snapshot['payments'][number]>(`SELECT id, customer, status FROM ${d}.payments`);
    const credits = await q<Snapshot['credits'][number]>(
      `SELECT payment_id, count(*)::int AS n FROM ${d}.ledger WHERE kind = 'credit' GROUP BY payment_id`,
    );
    const notifications = await q<Snapshot['notifications'][number]>(
      `SELECT payment_id, count(*)::int AS n FROM ${d}.notifications GROUP BY payment_id`,
    );
    const requests = await q<Snapshot['requests'][number]>(
      `SELECT idempotency_key AS key, state, recovery_point, locked_until, error, error_step FROM ${s}.requests`,
    );
    const [outbox] = await q<Snapshot['outbox']>(
      `SELECT count(*) FILTER (WHERE published_at IS NULL AND dead_at IS NULL)::int AS unpublished,
              count(*) FILTER (WHERE dead_at IS NOT NULL)::int AS dead,
              (array_agg(DISTINCT left(last_error, 200)) FILTER (WHERE last_error IS NOT NULL))[1:5] AS last_errors
         FROM ${s}.outbox`,
    );
    const [tasks] = await q<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${s}.tasks WHERE state IN ('ready', 'claimed', 'dead')`,
    );
    await client.query('COMMIT');
    return { payments, credits, notifications, requests, outbox: outbox!, tasksOpen: tasks!.n };
  } finally {
    client.release();
  }
}

function open(snap: Snapshot, intents: readonly Intent[]): string[] {
  const credited = new Set(snap.credits.map((c) => c.payment_id));
  const left: string[] = [];
  const pending = snap.requests.filter((r) => r.state === 'pending').length;
  if (pending) left.push(`${pending} keys pending`);
  if (snap.outbox.unpublished) left.push(`${snap.outbox.unpublished} events unpublished`);
  const uncredited = intents.filter(
    (i) => i.finalStatus === 201 && i.paymentId && !credited.has(i.paymentId),
  ).length;
  if (uncredited) left.push(`${uncredited} payments answered 201 not credited yet`);
  if (snap.tasksOpen) left.push(`${snap.tasksOpen} receipt tasks open`);
  return left;
}

/** Waits up to `timeoutMs` for the background work to drain, then returns the verdict. */
export async function settleAndJudge(
  pool: pg.Pool,
  schema: string,
  provider: FakeCardProvider,
  log: ClientLog,
  options: { timeoutMs?: number } = {},
): Promise<Verdict> {
  const started = Date.now();
  const timeoutMs = options.timeoutMs ?? 30_000;
  let snap: Snapshot;
  for (;;) {
    snap = await snapshot(pool, schema);
    if (open(snap, log.intents).length === 0 || Date.now() - started > timeoutMs) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  return judge(snap, provider, log, Date.now() - started);
}

function judge(snap: Snapshot, provider: FakeCardProvider, log: ClientLog, settledMs: number): Verdict {
  const intents = log.intents;
  const byCustomer = new Map<string, string[]>();
  for (const p of snap.payments) byCustomer.set(p.customer, [...(byCustomer.get(p.customer) ?? []), p.id]);
  const chargesByCustomer = new Map<string, number>();
  for (const c of provider.charges.values())
    chargesByCustomer.set(c.customer, (chargesByCustomer.get(c.customer) ?? 0) + 1);
  const credits = new Map(snap.credits.map((c) => [c.payment_id, c.n]));
  const paymentById = new Map(snap.payments.map((p) => [p.id, p]));
  const ok = intents.filter((i) => i.finalStatus === 201);
  return {
    intents: intents.length,
    answered201: ok.length,
    unanswered: intents
      .filter((i) => i.finalStatus !== 201)
      .map((i) => ({
        key: i.key,
        status: i.finalStatus,
        body: i.finalBody?.slice(0, 300),
        seen: summarise(i.seen),
      })),
    duplicatePayments: [...byCustomer]
      .filter(([, ids]) => ids.length > 1)
      .map(([customer, ids]) => ({ customer, ids })),
    duplicateCharges: [...chargesByCustomer]
      .filter(([, n]) => n > 1)
      .map(([customer, charges]) => ({ customer, charges })),
    duplicateCredits: snap.credits
      .filter((c) => c.n > 1)
      .map((c) => ({ paymentId: c.payment_id, credits: c.n })),
    duplicateNotifications: snap.notifications
      .filter((n) => n.n > 1)
      .map((n) => ({ paymentId: n.payment_id, notifications: n.n })),
    missingPayments: ok
      .map((i) => {
        const row = i.paymentId ? paymentById.get(i.paymentId) : undefined;
        const found = !row
          ? 'no row'
          : row.customer !== i.customer
            ? `customer ${row.customer}`
            : row.status !== 'succeeded'
              ? `status ${row.status}`
              : '';
        return { key: i.key, paymentId: i.paymentId, found };
      })
      .filter((m) => m.found !== ''),
    missingCredits: ok
      .filter((i) => i.paymentId && credits.get(i.paymentId) === undefined)
      .map((i) => ({ key: i.key, paymentId: i.paymentId! })),
    pendingKeys: snap.requests
      .filter((r) => r.state === 'pending')
      .map((r) => ({ key: r.key, recoveryPoint: r.recovery_point, lockedUntil: r.locked_until })),
    failedKeys: snap.requests
      .filter((r) => r.state === 'failed')
      .map((r) => ({ key: r.key, error: r.error, errorStep: r.error_step })),
    outbox: {
      unpublished: snap.outbox.unpublished,
      dead: snap.outbox.dead,
      lastErrors: snap.outbox.last_errors ?? [],
    },
    tasksOpen: snap.tasksOpen,
    providerCalls: provider.callCount(),
    providerCharges: provider.charges.size,
    settledMs,
    backlog: open(snap, intents),
    violations: log.violations,
    held: log.held,
  };
}

/** `503 503 network 409` → `503×2 network×1 409×1`, in order of first appearance. */
export function summarise(seen: readonly string[]): string {
  const counts = new Map<string, number>();
  for (const s of seen) counts.set(s, (counts.get(s) ?? 0) + 1);
  return [...counts].map(([k, v]) => `${k}×${v}`).join(' ');
}

/** The findings of a verdict, one line each; empty when everything held. */
export function findings(v: Verdict): string[] {
  const lines: string[] = [];
  const list = <T>(label: string, items: readonly T[], show: (item: T) => string) => {
    if (items.length) lines.push(`${label}: ${items.length} — ${items.slice(0, 5).map(show).join('; ')}`);
  };
  list(
    'no final 201',
    v.unanswered,
    (u) => `${u.key} → ${u.status ?? 'none'} ${u.body ?? ''} (seen ${u.seen})`,
  );
  list('duplicate payments', v.duplicatePayments, (d) => `${d.customer}: ${d.ids.join(', ')}`);
  list('duplicate charges', v.duplicateCharges, (d) => `${d.customer}: ${d.charges}`);
  list('duplicate credits', v.duplicateCredits, (d) => `${d.paymentId}: ${d.credits}`);
  list('duplicate receipts', v.duplicateNotifications, (d) => `${d.paymentId}: ${d.notifications}`);
  list('201 but payment missing', v.missingPayments, (m) => `${m.key} (${m.paymentId}): ${m.found}`);
  list('201 but not credited', v.missingCredits, (m) => `${m.key} (${m.paymentId})`);
  list('keys pending', v.pendingKeys, (p) => `${p.key} at ${p.recoveryPoint ?? '—'}`);
  list('keys failed', v.failedKeys, (f) => `${f.key} at ${f.errorStep ?? '—'}: ${f.error ?? ''}`);
  list(
    '5xx other than 503 + Retry-After',
    v.violations,
    (x) => `${x.status} ${x.key}: ${x.body.slice(0, 300)}`,
  );
  list(
    'requests held past the client timeout',
    v.held,
    (h) => `${h.key} sent at ${new Date(h.at).toISOString()}, no answer in ${h.ms} ms`,
  );
  if (v.outbox.dead) lines.push(`outbox: ${v.outbox.dead} dead events (${v.outbox.lastErrors.join(' | ')})`);
  if (v.backlog.length) lines.push(`not settled after ${v.settledMs} ms: ${v.backlog.join(', ')}`);
  return lines;
}
