/**
 * `idem drill` against real HTTP servers on 127.0.0.1 backed by real PostgreSQL: a correct endpoint
 * built on idem passes every drill; endpoints with one known bug each fail the drill made for it,
 * with the evidence in the report. The CLI runs as a child process too.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { run as runCommand } from '../../src/cli/commands/drill.js';
import {
  type DrillName,
  type DrillOptions,
  type DrillReport,
  type DrillResult,
  parseCount,
  renderTable,
  runDrills,
} from 'idem/testing';
import { alterPayload } from '../../src/drill/payload.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import {
  startPaymentsServer,
  type PaymentsServer,
  type ServerKind,
} from '../support/drill/payments-servers.js';

const kinds: ServerKind[] = ['correct', 'no-dedupe', 'check-then-act', 'ignores-tenant', 'ignores-payload'];

let db: TestSchema;
const servers = {} as Record<ServerKind, PaymentsServer>;
let tmp: string;

beforeAll(async () => {
  // 20 concurrent requests each hold a connection while they wait for the first execution.
  db = await createTestSchema({ poolSize: 24 });
  for (const kind of kinds) servers[kind] = await startPaymentsServer(db, kind);
  tmp = await mkdtemp(join(tmpdir(), 'idem-drill-'));
});

afterAll(async () => {
  for (const kind of kinds) await servers[kind]?.close();
  await db?.close();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

/** Options as a user would give them for the demo: a customer of its own, so counts are this run's. */
function demoOptions(kind: ServerKind, extra: Partial<DrillOptions> = {}): DrillOptions {
  const customer = `drill_${randomBytes(4).toString('hex')}`;
  return {
    url: servers[kind].paymentsUrl,
    body: JSON.stringify({ amount: 1250, currency: 'usd', customer }),
    headers: { Authorization: 'Bearer sk_test_acme' },
    secondCredential: ['Authorization', 'Bearer sk_test_globex'],
    requireKey: true,
    countUrl: `/v1/payments?customer=${customer}`,
    concurrency: 20,
    timeoutMs: 5000,
    ...extra,
  };
}

const drill = (report: DrillReport, name: DrillName): DrillResult => {
  const found = report.drills.find((d) => d.name === name);
  if (!found) throw new Error(`no ${name} drill in the report`);
  return found;
};
const statuses = (report: DrillReport) => Object.fromEntries(report.drills.map((d) => [d.name, d.status]));
const countDelta = (result: DrillResult) => {
  const count = result.data.count as { before: number; after: number };
  return count.after - count.before;
};

describe('idem drill against a correct endpoint built on idem', () => {
  it('passes every drill, with one execution and one effect per intent', async () => {
    const report = await runDrills(demoOptions('correct'));
    expect(statuses(report), renderTable(report)).toEqual({
      replay: 'passed',
      concurrent: 'passed',
      'key-reuse': 'passed',
      'missing-key': 'passed',
      'lost-response': 'passed',
      'cross-tenant': 'passed',
    });
    expect(report.ok).toBe(true);
    expect(report.totals).toEqual({ passed: 6, failed: 0, skipped: 0 });

    const replay = drill(report, 'replay');
    expect(replay.data.bodyMatch).toBe('identical bytes');
    expect(replay.data.replay).toMatchObject({ status: 201, replayed: true });
    expect(countDelta(replay)).toBe(1);

    const concurrent = drill(report, 'concurrent');
    expect(concurrent.data.finalStatuses).toEqual(Array(20).fill(201));
    expect(concurrent.data.notReplayed).toBe(1);
    expect(concurrent.data.distinctBodies).toBe(1);
    expect(countDelta(concurrent)).toBe(1);

    const reuse = drill(report, 'key-reuse');
    expect(reuse.data.reused).toMatchObject({ status: 422 });
    expect(reuse.data.probe).toMatchObject({ status: 201 });
    expect(reuse.data.change).toBe('amount: 1250 → 1251');
    expect(countDelta(reuse)).toBe(0);

    const missing = drill(report, 'missing-key');
    expect(
      Object.values(missing.data.answers as Record<string, { status: number }>).map((a) => a.status),
    ).toEqual([400, 400, 400]);
    expect(countDelta(missing)).toBe(0);

    const lost = drill(report, 'lost-response');
    expect(lost.data.cut).toMatchObject({ flushed: true, answeredBeforeCut: false });
    expect(lost.data.retry).toMatchObject({ status: 201, replayed: true });
    expect(countDelta(lost)).toBe(1);

    const tenant = drill(report, 'cross-tenant');
    expect(tenant.summary).toMatch(/ran independently/);
    expect(tenant.data.b).toMatchObject({ status: 201, replayed: null });
    expect(tenant.data.bodyMatch).toBe('different');
    expect(countDelta(tenant)).toBe(1);
  });

  it('passes on answers alone when no count URL is given, and says which heuristic it used', async () => {
    const options = demoOptions('correct', { concurrency: 8 });
    delete options.countUrl;
    const report = await runDrills(options);
    expect(report.ok, renderTable(report)).toBe(true);
    expect(drill(report, 'concurrent').data.notReplayed).toBe(1);
    expect(drill(report, 'concurrent').data.count).toBeUndefined();
  });

  it('retries in-progress answers (409 with Retry-After) and judges the answers they settle on', async () => {
    // Claim first and waitMs 0: a duplicate that meets the running first execution is answered
    // 409 at once. (Recorded at commit, duplicates run too and replay once the first commits.)
    const impatient = await startPaymentsServer(db, 'correct', {
      waitMs: 0,
      suffix: '_impatient',
      recording: 'claim',
    });
    try {
      const options = demoOptions('correct', {
        url: impatient.paymentsUrl,
        concurrency: 8,
        only: ['concurrent'],
      });
      const report = await runDrills(options);
      const concurrent = drill(report, 'concurrent');
      expect(concurrent.status, renderTable(report)).toBe('passed');
      expect(concurrent.data.firstStatuses as number[]).toContain(409);
      expect(concurrent.data.finalStatuses).toEqual(Array(8).fill(201));
      expect(concurrent.data.notReplayed).toBe(1);
      expect(countDelta(concurrent)).toBe(1);
      expect(concurrent.evidence.find((e) => e.label === 'retried')?.text).toMatch(
        /^\d+ answered in-progress first and were retried$/,
      );
    } finally {
      await impatient.close();
    }
  });

  it('skips the drills it was not given what they need for, and does not pass on skips alone', async () => {
    const options = demoOptions('correct', { only: ['missing-key', 'cross-tenant'] });
    delete options.secondCredential;
    delete options.requireKey;
    const report = await runDrills(options);
    expect(statuses(report)).toEqual({ 'missing-key': 'skipped', 'cross-tenant': 'skipped' });
    expect(report.ok).toBe(false);
  });
});

describe('idem drill against broken endpoints', () => {
  it('no dedupe: replay, concurrency, key reuse, missing key and lost response fail', async () => {
    const report = await runDrills(demoOptions('no-dedupe'));
    expect(report.ok).toBe(false);
    expect(statuses(report), renderTable(report)).toEqual({
      replay: 'failed',
      concurrent: 'failed',
      'key-reuse': 'failed',
      'missing-key': 'failed',
      'lost-response': 'failed',
      'cross-tenant': 'passed',
    });
    const replay = drill(report, 'replay');
    expect(replay.data.bodyMatch).toBe('different');
    expect(countDelta(replay)).toBe(2);
    const concurrent = drill(report, 'concurrent');
    expect(concurrent.data.distinctBodies).toBe(20);
    expect(countDelta(concurrent)).toBe(20);
    expect(concurrent.failures).toContain('20 different bodies for one key: the request ran more than once');
    expect(drill(report, 'missing-key').failures[0]).toBe('a request with no key got 201, not a 4xx refusal');
    // The lost request, the retry and the second retry each ran.
    expect(countDelta(drill(report, 'lost-response'))).toBe(3);
  });

  it('check-then-act dedupe: the concurrency drill fails with several executions, sequential replay passes', async () => {
    const report = await runDrills(demoOptions('check-then-act'));
    const concurrent = drill(report, 'concurrent');
    expect(concurrent.status, renderTable(report)).toBe('failed');
    expect(concurrent.data.distinctBodies).toBeGreaterThan(1);
    const executions = countDelta(concurrent);
    expect(executions).toBeGreaterThan(1);
    expect(concurrent.failures.join('\n')).toMatch(
      new RegExp(`the count changed by ${executions} for one intent sent 20 times`),
    );
    // When every request raced past the check, none is a replay and the server sends no marker at
    // all; otherwise the replays it marked show how many ran.
    if (concurrent.data.notReplayed !== null) {
      expect(concurrent.data.notReplayed).toBe(executions);
      expect(concurrent.failures.join('\n')).toMatch(
        /answers are not marked replayed: the request ran \d+ times/,
      );
    }
    expect(drill(report, 'replay').status).toBe('passed');
    expect(drill(report, 'key-reuse').status).toBe('passed');
    expect(report.ok).toBe(false);
  });

  it("tenant left out of the key scope: tenant B gets tenant A's answer", async () => {
    const report = await runDrills(demoOptions('ignores-tenant'));
    const tenant = drill(report, 'cross-tenant');
    expect(tenant.status, renderTable(report)).toBe('failed');
    expect(tenant.data.b).toMatchObject({ status: 201, replayed: true });
    expect(tenant.data.bodyMatch).toBe('identical bytes');
    expect(countDelta(tenant)).toBe(0);
    expect(tenant.summary).toBe(
      "B's answer is marked Idempotent-Replayed: true: A's stored answer was served to B",
    );
    expect(statuses(report)).toMatchObject({ replay: 'passed', concurrent: 'passed', 'key-reuse': 'passed' });
  });

  it('payload left out of the fingerprint: another payload under the same key gets the first answer', async () => {
    const report = await runDrills(demoOptions('ignores-payload'));
    const reuse = drill(report, 'key-reuse');
    expect(reuse.status, renderTable(report)).toBe('failed');
    expect(reuse.data.reused).toMatchObject({ status: 201, replayed: true });
    expect(reuse.summary).toBe(
      'the changed payload was accepted under the same key (201) and got the first answer back',
    );
    expect(statuses(report)).toMatchObject({
      replay: 'passed',
      concurrent: 'passed',
      'cross-tenant': 'passed',
    });
  });
});

describe('idem drill as a command', () => {
  const cli = (args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        ['--import', 'tsx', 'src/cli/main.ts', 'drill', ...args],
        { cwd: join(import.meta.dirname, '../..'), timeout: 30_000 },
        (error, stdout, stderr) => {
          const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
          resolve({ code, stdout, stderr });
        },
      );
    });

  it('exits 0 against the correct endpoint, prints the table, shows progress and writes JSON', async () => {
    const customer = `drill_cli_${randomBytes(3).toString('hex')}`;
    const json = join(tmp, 'correct.json');
    const { code, stdout, stderr } = await cli([
      '--url',
      servers.correct.paymentsUrl,
      '--body',
      JSON.stringify({ amount: 500, currency: 'eur', customer }),
      '--header',
      'Authorization: Bearer sk_test_acme',
      '--second-credential',
      'Authorization: Bearer sk_test_initech',
      '--require-key',
      '--count-url',
      `/v1/payments?customer=${customer}`,
      '--concurrency',
      '10',
      '--json',
      json,
    ]);
    expect(code, stdout + stderr).toBe(0);
    expect(stderr).toContain('[2/6] concurrent: 10 identical requests in flight…');
    expect(stderr).toContain('[6/6] cross-tenant: passed in');
    expect(stdout).toMatch(
      /^pass {4}concurrent {5}10 answers, 10×201, 1 distinct body, 1 not replayed, count \+1$/m,
    );
    expect(stdout).toContain('Result: PASS · 6 of 6 drills passed, 0 failed, 0 skipped');
    const report = JSON.parse(await readFile(json, 'utf8')) as DrillReport;
    expect(report).toMatchObject({
      tool: 'idem drill',
      ok: true,
      totals: { passed: 6, failed: 0, skipped: 0 },
    });
    expect(report.target).toMatchObject({ method: 'POST', concurrency: 10, secondTenant: true });
    expect(JSON.stringify(report)).not.toContain('sk_test_'); // credentials never reach the report
  });

  it('exits 1 with the evidence when a drill fails', async () => {
    const json = join(tmp, 'broken.json');
    const failed = await cli([
      '--url',
      servers['ignores-payload'].paymentsUrl,
      '--body',
      JSON.stringify({ amount: 700, currency: 'usd', customer: 'drill_cli_broken' }),
      '-H',
      'Authorization: Bearer sk_test_acme',
      '--only',
      'key-reuse',
      '--json',
      json,
      '--quiet',
    ]);
    expect(failed.code, failed.stdout + failed.stderr).toBe(1);
    expect(failed.stderr).toBe('');
    expect(failed.stdout).toMatch(
      /^FAIL {4}key-reuse {2}the changed payload was accepted under the same key \(201\)/m,
    );
    expect(failed.stdout).toMatch(/same key +201 · \d+ B · Idempotent-Replayed: true · \{"id":"pay_/);
    const report = JSON.parse(await readFile(json, 'utf8')) as DrillReport;
    expect(report.ok).toBe(false);
    expect(report.drills.map((d) => [d.name, d.status])).toEqual([['key-reuse', 'failed']]);
  });

  it('exits 2 with one line for unusable arguments', async () => {
    // In-process (the command's run() is what main.ts turns into the exit code): a child process
    // costs seconds of tsx start-up on a loaded machine, and the two tests above already spawn one.
    const written: string[] = [];
    const spy = vi
      .spyOn(console, 'error')
      .mockImplementation((...args: unknown[]) => void written.push(`${args.join(' ')}\n`));
    try {
      expect(await runCommand(['--url', 'ftp://127.0.0.1/x'])).toBe(2);
      expect(await runCommand(['--body', '{}'])).toBe(2);
      expect(await runCommand(['--url', 'http://127.0.0.1:1/x', '--only', 'replay,nope'])).toBe(2);
      expect(await runCommand(['--url', 'http://127.0.0.1:1/x', '--concurrency', 'many'])).toBe(2);
      expect(await runCommand(['--url', 'http://127.0.0.1:1/x', '--bogus'])).toBe(2);
    } finally {
      spy.mockRestore();
    }
    const text = written.join('');
    expect(text).toContain('idem drill: url must be http:// or https://, not ftp:');
    expect(text).toContain('idem drill: --url is required');
    expect(text).toContain("idem drill: unknown drill 'nope'");
    expect(text).toContain("idem drill: --concurrency must be a whole number, not 'many'");
    expect(text).toContain("idem drill: unknown option '--bogus' (idem drill --help shows the usage)\n");
    expect(text).not.toContain('usage: idem drill');
  });
});

describe('drill helpers', () => {
  it('reads counts from the shapes list and count endpoints answer with', () => {
    const count = (text: string, path: string | null = null) => parseCount(Buffer.from(text), path);
    expect(count('7')).toBe(7);
    expect(count('[1,2,3]')).toBe(3);
    expect(count('{"data":[{},{}]}')).toBe(2);
    expect(count('{"total_count":12,"data":[]}')).toBe(12);
    expect(count('{"meta":{"total":"41"}}', 'meta.total')).toBe(41);
    expect(count('{"payments":[1,2]}', 'payments.length')).toBe(2);
    expect(count('{"payments":[1,2]}', 'payments')).toBe(2);
    expect(count('{"nothing":true}')).toBeUndefined();
    expect(count('<html>')).toBeUndefined();
  });

  it('derives a different payload by changing the first number, else the first string', () => {
    const alter = (text: string) => alterPayload(Buffer.from(text));
    expect(alter('{"customer":"c","amount":100}')).toEqual({
      body: Buffer.from('{"customer":"c","amount":101}'),
      change: 'amount: 100 → 101',
    });
    expect(alter('{"order":{"lines":[{"sku":"a","qty":2}]}}')?.change).toBe('order.lines.0.qty: 2 → 3');
    expect(alter('{"note":"hi"}')?.change).toBe('note: "hi" → "hi-changed"');
    expect(alter('not json')).toBeUndefined();
    expect(alterPayload(null)).toBeUndefined();
  });
});
