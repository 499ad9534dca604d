/**
 * The payments demo through the fault proxy, with clients retrying the same key, while a scenario
 * switches faults on and off; then the verdict, read directly in PostgreSQL. Shared by the vitest
 * file (demo-faults.test.ts, short cases) and the long run (faulty-link-run.ts).
 *
 * The scenario calls `faultEnded(name)` when a fault ends: a probe then sends new payments (each
 * attempt bounded by 3 s) until one is answered 201, and the time from the fault's end to that
 * answer is the demo's recovery time for the report.
 */
import { format } from 'node:util';
import pg from 'pg';
import type { DemoHandle } from '../../../demo/server.js';
import { findings, settleAndJudge, type Verdict } from './demo-verdict.js';
import { newClientLog, runClients, statusLine, timeToNewPayment, type ClientLog } from './payment-clients.js';
import { startPgProxyTo, type PgProxy, type ProxyStats } from './pg-proxy.js';

export interface FaultRun {
  proxy: PgProxy;
  demo: DemoHandle;
  log: ClientLog;
  /** A pool straight to PostgreSQL (not through the proxy), for the scenario's own observations. */
  direct: pg.Pool;
  /** Milliseconds since the clients started. */
  elapsed: () => number;
  /**
   * The fault `name` just ended: measure the time to the next new payment. `judged: false` when
   * other faults go on (latency, say), so the time says little about recovery.
   */
  faultEnded: (name: string, options?: { judged?: boolean }) => void;
  /** One line in the run's timeline. */
  note: (line: string) => void;
}

export interface Recovery {
  fault: string;
  /** From the fault's end to the first new payment answered 201; undefined: none within the probe's deadline. */
  ms: number | undefined;
  /** False when other faults were still on: the time is reported, not held to the 1 s target. */
  judged: boolean;
  probeKey: string;
  seen: string[];
}

export interface FaultReport {
  verdict: Verdict;
  findings: string[];
  recoveries: Recovery[];
  proxy: ProxyStats;
  statuses: string;
  samples503: string[];
  networkCauses: string;
  slow: ClientLog['slow'];
  /** Distinct lines the demo logged on stderr, with counts. */
  logs: { line: string; count: number }[];
  timeline: string[];
  durationMs: number;
}

export interface FaultRunOptions {
  /** The database the demo would use; the proxy goes in front of it. */
  databaseUrl: string;
  schema: string;
  /** Starts the demo on `databaseUrl` (the proxy's) with its LISTEN on `directUrl` (undefined: through the proxy too). */
  startDemo(databaseUrl: string, directUrl: string | undefined): Promise<DemoHandle>;
  /** The dispatcher's LISTEN through the proxy (default) or straight to PostgreSQL. */
  listen?: 'proxy' | 'direct';
  clients?: number;
  /** Clients run this long after each has had a payment answered, before the scenario. Default 500 ms. */
  warmupMs?: number;
  scenario(run: FaultRun): Promise<void>;
  /** Clients keep starting payments this long after the scenario. Default 1000 ms. */
  tailMs?: number;
  /** Bound on the background work draining after the last answer. Default 30 s. */
  settleMs?: number;
  /** Bounds of one client attempt (default 30 s) and of one intent (default 60 s). */
  attemptTimeoutMs?: number;
  intentDeadlineMs?: number;
  /** How long the probe after a fault's end tries before it reports NEVER. Default 30 s. */
  recoveryDeadlineMs?: number;
  /** Print the timeline as it happens. */
  say?: (line: string) => void;
}

/** Collects what the demo writes to stderr while `fn` runs (the demo runs in this process). */
export function captureStderr(): { lines: Map<string, number>; restore(): void } {
  const lines = new Map<string, number>();
  const original = { error: console.error, warn: console.warn };
  const keep = (...args: unknown[]) => {
    const line = format(...args)
      .replace(/\n\s+at [^\n]*/g, '')
      .slice(0, 600);
    lines.set(line, (lines.get(line) ?? 0) + 1);
  };
  console.error = keep;
  console.warn = keep;
  return {
    lines,
    restore() {
      console.error = original.error;
      console.warn = original.warn;
    },
  };
}

export async function runDemoUnderFaults(options: FaultRunOptions): Promise<FaultReport> {
  const proxy = await startPgProxyTo(options.databaseUrl);
  const direct = new pg.Pool({ connectionString: options.databaseUrl, max: 2 });
  const stderr = captureStderr();
  const timeline: string[] = [];
  const started = Date.now();
  const note = (line: string) => {
    const text = `${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s ${line}`;
    timeline.push(text);
    options.say?.(text);
  };
  let demo: DemoHandle | undefined;
  try {
    demo = await options.startDemo(
      proxy.url(options.databaseUrl),
      options.listen === 'direct' ? options.databaseUrl : undefined,
    );
    const log = newClientLog();
    const recoveries: Promise<Recovery>[] = [];
    let running = true;
    const running$ = runClients(
      () => demo!.url,
      options.clients ?? 4,
      () => running,
      log,
      {
        attemptTimeoutMs: options.attemptTimeoutMs ?? 30_000,
        deadlineMs: options.intentDeadlineMs ?? 60_000,
      },
    );
    const run: FaultRun = {
      proxy,
      demo,
      log,
      direct,
      elapsed: () => Date.now() - started,
      note,
      faultEnded: (name, how = {}) => {
        const since = Date.now();
        note(`${name}: ended`);
        recoveries.push(
          timeToNewPayment(demo!.url, since, log, {
            deadlineMs: options.recoveryDeadlineMs ?? 30_000,
          }).then(({ ms, intent }) => {
            note(`${name}: first new payment ${ms === undefined ? 'NEVER' : `${ms} ms`} after its end`);
            return { fault: name, ms, judged: how.judged ?? true, probeKey: intent.key, seen: intent.seen };
          }),
        );
      },
    };
    // Warm: every client has had a payment answered (bounded), then a little more.
    const warmBy = Date.now() + 15_000;
    while ((log.byStatus.get('201') ?? 0) < (options.clients ?? 4) && Date.now() < warmBy)
      await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, options.warmupMs ?? 500));
    note(`warm: ${statusLine(log)}`);
    await options.scenario(run);
    await new Promise((r) => setTimeout(r, options.tailMs ?? 1000));
    running = false;
    const measured = await Promise.all(recoveries);
    await running$;
    note(`clients done: ${log.intents.length} intents; ${statusLine(log)}`);
    const verdict = await settleAndJudge(direct, options.schema, demo.provider!, log, {
      timeoutMs: options.settleMs ?? 30_000,
    });
    note(`settled in ${verdict.settledMs} ms`);
    // The demo stops while the link is healthy: a stop that hangs is a finding of its own.
    const closing = Date.now();
    const closed = await withTimeout(demo.close(), 15_000, 'demo.close()');
    demo = undefined;
    note(closed ? `demo closed in ${Date.now() - closing} ms` : 'demo.close() still waiting after 15 s');
    const found = findings(verdict);
    if (!closed) found.push('demo.close() did not finish within 15 s of a healthy link');
    return {
      verdict,
      findings: found,
      recoveries: measured,
      proxy: proxy.stats(),
      statuses: statusLine(log),
      samples503: log.samples503,
      slow: log.slow,
      networkCauses: [...log.networkCauses].map(([k, v]) => `${k}×${v}`).join(' '),
      logs: [...stderr.lines].map(([line, count]) => ({ line, count })),
      timeline,
      durationMs: Date.now() - started,
    };
  } finally {
    stderr.restore();
    await proxy.close();
    if (demo) await withTimeout(demo.close(), 15_000, 'demo.close()');
    await direct.end();
  }
}

/** Whether `p` settled within `ms`. */
async function withTimeout(p: Promise<unknown>, ms: number, what: string): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const settled = await Promise.race([
    p.then(
      () => true,
      (e: unknown) => {
        console.error(`${what}:`, e);
        return true;
      },
    ),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => {
        console.error(`${what} did not finish within ${ms} ms (something is still waiting)`);
        resolve(false);
      }, ms);
    }),
  ]);
  clearTimeout(timer);
  return settled;
}

/** The report as text, for a test's output or the long run's. */
export function formatReport(title: string, r: FaultReport): string {
  const v = r.verdict;
  const lines = [
    `── ${title} (${(r.durationMs / 1000).toFixed(1)} s)`,
    `   intents ${v.intents}, answered 201: ${v.answered201}; answers: ${r.statuses}`,
    `   duplicates: payments ${v.duplicatePayments.length}, charges ${v.duplicateCharges.length}, credits ${v.duplicateCredits.length}, receipts ${v.duplicateNotifications.length}; ` +
      `lost: payments ${v.missingPayments.length}, credits ${v.missingCredits.length}; keys pending ${v.pendingKeys.length}, failed ${v.failedKeys.length}; 5xx violations ${v.violations.length}`,
    `   provider: ${v.providerCharges} charges for ${v.providerCalls} calls; outbox unpublished ${v.outbox.unpublished}, dead ${v.outbox.dead}; settled in ${v.settledMs} ms`,
    `   recovery: ${r.recoveries.map((x) => `${x.fault} → ${x.ms === undefined ? 'NEVER' : `${x.ms} ms`}${x.ms !== undefined && x.ms > 1000 ? (x.judged ? ' (over 1 s)' : ' (other faults still on)') : ''}`).join('; ') || 'n/a'}`,
    `   proxy: ${Object.entries(r.proxy)
      .filter(([, n]) => n !== 0)
      .map(([k, n]) => `${k} ${n}`)
      .join(', ')}`,
  ];
  if (r.networkCauses) lines.push(`   client network errors: ${r.networkCauses}`);
  const slow = [...r.slow].sort((a, b) => b.ms - a.ms);
  if (slow.length)
    lines.push(
      `   answers slower than 5 s: ${slow.length}; slowest ${slow
        .slice(0, 3)
        .map((x) => `${x.ms} ms → ${x.status} (sent ${new Date(x.at).toISOString()})`)
        .join(', ')}`,
    );
  for (const x of r.recoveries.filter((x) => x.ms === undefined || x.ms > 1000))
    lines.push(
      `   recovery probe after ${x.fault} (${x.probeKey}) saw first: ${x.seen.join(' ') || 'nothing'}`,
    );
  for (const s of r.samples503.slice(0, 2)) lines.push(`   503 sample: ${s}`);
  for (const f of r.findings) lines.push(`   FINDING ${f}`);
  const logs = [...r.logs].sort((a, b) => b.count - a.count).slice(0, 12);
  for (const l of logs) lines.push(`   log ×${l.count}: ${l.line.replace(/\s+/g, ' ').slice(0, 400)}`);
  for (const t of r.timeline) lines.push(`   | ${t}`);
  return lines.join('\n');
}

/** Drops what a demo created on the database at `url`: idem's `schema` and the demo's `<schema>_demo`. */
export async function dropDemoSchemasAt(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(
      `DROP SCHEMA IF EXISTS "${schema}" CASCADE; DROP SCHEMA IF EXISTS "${schema}_demo" CASCADE`,
    );
  } finally {
    await client.end();
  }
}
