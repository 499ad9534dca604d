/** Runs the drills one after another, so counts read before and after a drill are its own. */
import type { DrillName } from './drill-names.js';
import { DrillContext, type DrillResult } from './drill.js';
import { drills } from './drills/index.js';
import { DrillClient } from './http-client.js';
import { resolveDrillOptions, type DrillOptions } from './options.js';
import { silentProgress, type DrillProgress } from './progress.js';

/** Everything `idem drill` found; what `--json` writes. */
export interface DrillReport {
  tool: 'idem drill';
  /** Format version of this report. */
  version: 1;
  target: {
    url: string;
    method: string;
    keyHeader: string;
    replayHeader: string;
    concurrency: number;
    requireKey: boolean;
    countUrl: string | null;
    /** Whether a second credential was given (its value is never written). */
    secondTenant: boolean;
    timeoutMs: number;
  };
  startedAt: string;
  durationMs: number;
  /** True when no drill failed and at least one passed. */
  ok: boolean;
  totals: Record<'passed' | 'failed' | 'skipped', number>;
  drills: DrillResult[];
}

export interface RunDrillsOptions {
  /** Where progress goes. Default: nowhere. The CLI passes stderr. */
  progress?: DrillProgress;
}

/**
 * Runs every selected drill against the endpoint and returns the report. Throws
 * `InvalidArgumentError` for unusable options; a drill that throws is reported as failed.
 */
export async function runDrills(options: DrillOptions, run: RunDrillsOptions = {}): Promise<DrillReport> {
  const resolved = resolveDrillOptions(options);
  const progress = run.progress ?? silentProgress;
  const client = new DrillClient(resolved.timeoutMs);
  const startedAt = new Date();
  const started = performance.now();
  const results: DrillResult[] = [];
  try {
    for (const [index, name] of resolved.only.entries()) {
      const drill = drills[name];
      progress.start(index, resolved.only.length, drill);
      const context = new DrillContext(resolved, client, (message) => progress.step(message));
      const t0 = performance.now();
      let outcome: Omit<DrillResult, 'name' | 'title' | 'durationMs'>;
      try {
        outcome = await drill.run(context);
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        outcome = {
          status: 'failed',
          summary: message,
          failures: [message],
          notes: [],
          evidence: [],
          data: {},
        };
      }
      const result: DrillResult = {
        name: name satisfies DrillName,
        title: drill.title,
        ...outcome,
        durationMs: Math.round(performance.now() - t0),
      };
      results.push(result);
      progress.finish(result);
    }
  } finally {
    client.close();
  }
  const totals = { passed: 0, failed: 0, skipped: 0 };
  for (const r of results) totals[r.status]++;
  return {
    tool: 'idem drill',
    version: 1,
    target: {
      url: withoutCredentials(resolved.url),
      method: resolved.method,
      keyHeader: resolved.keyHeader,
      replayHeader: resolved.replayHeader,
      concurrency: resolved.concurrency,
      requireKey: resolved.requireKey,
      countUrl: resolved.countUrl ? withoutCredentials(resolved.countUrl) : null,
      secondTenant: resolved.secondCredential !== null,
      timeoutMs: resolved.timeoutMs,
    },
    startedAt: startedAt.toISOString(),
    durationMs: Math.round(performance.now() - started),
    ok: totals.failed === 0 && totals.passed > 0,
    totals,
    drills: results,
  };
}

/** The report is meant to be shared (CI artefacts): user:password in a URL stays out of it. */
function withoutCredentials(url: URL): string {
  const copy = new URL(url.href);
  copy.username = '';
  copy.password = '';
  return copy.href;
}
