/**
 * The long run: the payments demo through a faulty link to PostgreSQL, every fault at once and in
 * sequence, for two minutes, with node-postgres's pipeline mode on and then off.
 *
 *   npx tsx test/support/faults/faulty-link-run.ts [--duration 120] [--clients 6]
 *     [--pipeline both|on|off] [--listen proxy|direct] [--keep]
 *
 * DATABASE_URL when set; otherwise an embedded PostgreSQL under .idem/faulty-link-postgres.
 * Throughout: 5 % of COMMIT acknowledgements lost, random resets (0.5 a second). In sequence,
 * on top (times for the default two minutes, scaled with --duration):
 *   0–20 s   latency 50–300 ms per chunk each way
 *   30–45 s  a silent partition (15 s), then heal
 *   60–75 s  a failover: every connection reset, new ones unanswered for 15 s
 *   90–110 s latency again, with a second 15 s silent partition inside it (92–107 s)
 * Clients retry the SAME key on 409, 5xx, network errors and timeouts. Then the checks of
 * demo-faults.test.ts: no duplicate payment, charge or credit; every 201 present and credited
 * once; no key pending or failed after settling; no 500; the time from each fault's end to the
 * first new payment answered 201 (target: 1 s). Exit code 0 when everything held, 1 otherwise.
 */
import { randomSchema, startDemo } from '../../../demo/server.js';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../embedded.js';
import {
  dropDemoSchemasAt,
  formatReport,
  runDemoUnderFaults,
  type FaultReport,
  type FaultRun,
} from './demo-under-fault.js';

interface Options {
  durationS: number;
  clients: number;
  pipelines: boolean[];
  listen: 'proxy' | 'direct';
  keep: boolean;
}

function parse(argv: string[]): Options {
  const options: Options = {
    durationS: 120,
    clients: 6,
    pipelines: [true, false],
    listen: 'proxy',
    keep: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${arg} needs a value`);
      return v;
    };
    if (arg === '--duration') options.durationS = Number(value());
    else if (arg === '--clients') options.clients = Number(value());
    else if (arg === '--pipeline') {
      const v = value();
      options.pipelines = v === 'both' ? [true, false] : [v === 'on' || v === 'true'];
    } else if (arg === '--listen') options.listen = value() === 'direct' ? 'direct' : 'proxy';
    else if (arg === '--keep') options.keep = true;
    else throw new Error(`unknown option ${arg}`);
  }
  return options;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The sequence above, scaled to `durationS` (120 is the plan as written). */
function scenario(durationS: number) {
  const at = (s: number) => (s / 120) * durationS * 1000;
  return async ({ proxy, faultEnded, note }: FaultRun) => {
    const t0 = Date.now();
    const until = async (s: number) => {
      const wait = t0 + at(s) - Date.now();
      if (wait > 0) await sleep(wait);
    };
    proxy.loseCommitAcks(0.05);
    proxy.randomResets(0.5);
    note('background: 5 % of COMMIT acknowledgements lost, random resets 0.5/s');

    proxy.latency({ minMs: 50, maxMs: 300 });
    note('latency 50–300 ms');
    await until(20);
    proxy.latency(null);
    faultEnded('latency (0–20 s)');

    await until(30);
    note(`silent partition for ${at(15) / 1000} s`);
    const first = proxy.partition();
    await until(45);
    first.heal();
    faultEnded('silent partition (30–45 s)');

    await until(60);
    note(`failover: reset, new connections unanswered for ${at(15) / 1000} s`);
    await proxy.failover({ unansweredMs: at(15) });
    faultEnded('failover (60–75 s)');

    await until(90);
    proxy.latency({ minMs: 50, maxMs: 300 });
    note('latency 50–300 ms, then a second partition inside it');
    await until(92);
    const second = proxy.partition();
    await until(107);
    second.heal();
    faultEnded('partition under latency (92–107 s)', { judged: false });
    await until(110);
    proxy.latency(null);
    faultEnded('latency (90–110 s)');

    await until(120);
    proxy.loseCommitAcks(0);
    proxy.randomResets(0);
    faultEnded('lost acks and resets (0–120 s)');
  };
}

function summaryRow(pipeline: boolean, r: FaultReport): string {
  const v = r.verdict;
  const count = (s: string) => countOf(r.statuses, s);
  return [
    `pipeline ${pipeline ? 'on ' : 'off'}`,
    `payments ${v.intents}`,
    `201 ${v.answered201}`,
    `503 ${count('503')}`,
    `409 ${count('409')}`,
    `500 ${count('500')}`,
    `timeouts ${count('timeout')}`,
    `network ${count('network')}`,
    `duplicates ${v.duplicatePayments.length + v.duplicateCharges.length + v.duplicateCredits.length}`,
    `lost ${v.missingPayments.length + v.missingCredits.length + v.unanswered.length}`,
    `pending ${v.pendingKeys.length}`,
    `failed ${v.failedKeys.length}`,
    `recovery ${r.recoveries.map((x) => (x.ms === undefined ? 'NEVER' : `${x.ms}ms`)).join('/')}`,
  ].join(' | ');
}

function countOf(statuses: string, status: string): number {
  const match = new RegExp(`(?:^| )${status}×(\\d+)`).exec(statuses);
  return match ? Number(match[1]) : 0;
}

async function main(): Promise<number> {
  const options = parse(process.argv.slice(2));
  const started = Date.now();
  const say = (line: string) =>
    console.log(`[faulty-link ${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s] ${line}`);
  let embedded: EmbeddedDatabase | undefined;
  let databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) {
    say('DATABASE_URL is not set: starting an embedded PostgreSQL under .idem/faulty-link-postgres');
    embedded = await startEmbeddedPostgres({
      dir: '.idem/faulty-link-postgres',
      persistent: false,
      notice: say,
    });
    databaseUrl = embedded.url;
  }
  const rows: string[] = [];
  let failed = false;
  try {
    for (const pipeline of options.pipelines) {
      const schema = randomSchema('idem_faulty');
      say(
        `pipeline ${pipeline ? 'on' : 'off'}: schema ${schema}, ${options.clients} clients, ${options.durationS} s, LISTEN ${options.listen}`,
      );
      try {
        const report = await runDemoUnderFaults({
          databaseUrl,
          schema,
          listen: options.listen,
          clients: options.clients,
          startDemo: (url, directUrl) =>
            startDemo({
              databaseUrl: url,
              directUrl,
              schema,
              port: 0,
              providerPort: 0,
              providerUrl: undefined,
              pipeline,
              quiet: true,
            }),
          scenario: scenario(options.durationS),
          tailMs: 3000,
          settleMs: 60_000,
          attemptTimeoutMs: 30_000,
          intentDeadlineMs: 180_000,
          recoveryDeadlineMs: 60_000,
          say,
        });
        console.log(formatReport(`pipeline ${pipeline ? 'on' : 'off'}`, report));
        rows.push(summaryRow(pipeline, report));
        const slow = report.recoveries.filter((x) => x.ms === undefined || (x.judged && x.ms > 1000));
        if (report.findings.length > 0 || slow.length > 0) failed = true;
      } finally {
        if (!options.keep)
          await dropDemoSchemasAt(databaseUrl, schema).catch((e: unknown) => say(`drop: ${String(e)}`));
      }
    }
  } finally {
    await embedded?.stop();
  }
  console.log('\n== faulty link: summary');
  for (const row of rows) console.log(`   ${row}`);
  console.log(
    failed ? '== FAILED: see the FINDING lines and recoveries over 1 s above' : '== everything held',
  );
  return failed ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(2);
  },
);
