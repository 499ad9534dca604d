/**
 * The chaos soak: `npm run soak -- [--duration 60] [--instances 3] [--clients 8]
 * [--transport rabbitmq|nats|in-database]`.
 *
 * The fake provider runs as its own process; several demo app instances run as child processes
 * against one PostgreSQL (a fresh schema per run, dropped at the end unless --keep) and the chosen
 * broker. Client loops send payments and retry with the same key on every error; meanwhile app
 * instances are killed with SIGKILL at random moments and restarted, and the broker is restarted.
 * Then it waits for quiescence and checks every intent (see verify.ts). Exit code 0: no duplicate
 * and no loss; 1: duplicates or losses (listed); 2: the soak itself could not run.
 * docs/operations/reliability.md describes the method and the counts of long runs.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { fromPg } from '../src/adapters/pg.js';
import { demoSchemaSql } from '../demo/schema.js';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../src/embedded/embedded-postgres.js';
import { migrate } from '../src/migrate/migrate.js';
import { createBroker } from './broker.js';
import { brokerLoop, killLoop, newChaosStats } from './chaos.js';
import { Child } from './child.js';
import { clientLoop, newClientStats, type Intent } from './clients.js';
import { AppInstance, type InstanceEnvironment } from './instances.js';
import { parseOptions } from './options.js';
import { frequentErrors } from './log-scan.js';
import { Random } from './random.js';
import { printSummary, summarise } from './report.js';
import { settle } from './settle.js';
import { verify } from './verify.js';

const repoDir = resolve(fileURLToPath(new URL('..', import.meta.url)));

/** Starts an instance, again after a failed start (a broker still coming back), a bounded number of times. */
async function startWithRetries(instance: AppInstance, say: (line: string) => void): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await instance.start();
    } catch (error) {
      if (attempt >= 10) throw error;
      say(
        `start of ${instance.name} failed (attempt ${attempt}): ${(error as Error).message.split('\n')[0]}`,
      );
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
}

async function main(): Promise<number> {
  const options = parseOptions(process.argv.slice(2));
  const runId = `soak_${randomBytes(4).toString('hex')}`;
  const schema = runId;
  const runDir = join(repoDir, '.idem', 'soak', runId);
  mkdirSync(runDir, { recursive: true });
  const started = Date.now();
  const say = (line: string) =>
    console.log(`[soak ${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s] ${line}`);
  say(
    `${runId}: ${options.transport}, ${options.instances} instances, ${options.clients} clients, ${options.durationMs / 1000} s of chaos, seed ${options.seed}; logs in ${runDir}`,
  );

  let interrupted = false;
  const onSignal = () => {
    if (interrupted) return;
    interrupted = true;
    say('interrupted: stopping the chaos, restoring the broker and cleaning up');
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  let embedded: EmbeddedDatabase | undefined;
  let databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) {
    say('DATABASE_URL is not set: starting an embedded PostgreSQL under .idem/soak-postgres');
    embedded = await startEmbeddedPostgres({ dir: '.idem/soak-postgres', persistent: false });
    databaseUrl = embedded.url;
  }
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 4 });
  pool.on('error', () => undefined);
  const broker = createBroker(options.transport, runDir);
  const instances: AppInstance[] = [];
  let provider: Child | undefined;
  try {
    // The schema is made before any instance starts, so instances never race to create it.
    await migrate(fromPg(pool), { schema });
    await pool.query(demoSchemaSql(`${schema}_demo`));
    await broker.start();

    // Shared by every instance; the provider's URL is filled in once it listens.
    const environment: InstanceEnvironment = {
      databaseUrl,
      schema,
      providerUrl: '',
      leaseMs: options.leaseMs,
      broker: broker.env,
      runDir,
      repoDir,
    };
    for (let i = 1; i <= options.instances; i++) instances.push(await AppInstance.create(i, environment));
    provider = new Child({
      name: 'provider',
      command: process.execPath,
      args: ['--import', 'tsx', 'soak/provider-main.ts'],
      cwd: repoDir,
      env: {
        ...process.env,
        PROVIDER_PORT: '0',
        PROVIDER_LATENCY_MS: String(options.providerLatencyMs),
        WEBHOOK_TARGETS: instances.map((i) => i.url).join(','),
      },
      logFile: join(runDir, 'provider.log'),
    });
    const providerUrl = /listening on (\S+)/.exec(
      await provider.waitForLine(/provider listening on/, 90_000),
    )![1]!;
    environment.providerUrl = providerUrl;
    await Promise.all(instances.map((i) => startWithRetries(i, say)));
    say(`provider ${providerUrl}; instances ${instances.map((i) => i.url).join(' ')}; broker ${broker.name}`);

    const random = new Random(options.seed);
    const clientStats = newClientStats();
    const chaosStats = newChaosStats();
    const intents: Intent[] = [];
    const chaosStarted = Date.now();
    const endAt = chaosStarted + options.durationMs;
    const running = () => !interrupted && Date.now() < endAt;
    const chaos = {
      instances,
      broker,
      pool,
      schema,
      random,
      stats: chaosStats,
      killEveryMs: options.killEveryMs,
      brokerEveryMs: options.brokerEveryMs,
      running,
      say,
    };
    const progress = setInterval(() => {
      const done = intents.filter((i) => i.finalStatus !== undefined).length;
      say(
        `${done}/${intents.length} payments answered, ${clientStats.requests} requests, ${chaosStats.kills} kills, ${chaosStats.brokerRestarts} broker restarts`,
      );
    }, 10_000);
    const clientsDone = Promise.all(
      Array.from({ length: options.clients }, (_, index) =>
        clientLoop(index, {
          runId,
          instances,
          providerUrl,
          random,
          stats: clientStats,
          intents,
          requestTimeoutMs: options.requestTimeoutMs,
          intentDeadlineMs: options.intentDeadlineMs,
          refundShare: options.refundShare,
          refundRace: options.refundRace,
          declinedShare: options.declinedShare,
          running,
        }),
      ),
    );
    try {
      await Promise.all([killLoop(chaos), brokerLoop(chaos)]);
      // The chaos is over: every instance up again, then the clients finish their last payments.
      await Promise.all(instances.filter((i) => !i.up).map((i) => startWithRetries(i, say)));
      say('chaos over; waiting for the clients to finish their last payments');
      await clientsDone;
    } finally {
      clearInterval(progress);
    }
    say(`clients done: ${intents.length} payments; settling`);
    const settled = await settle(pool, schema, providerUrl, intents, options.settleMs, say);
    const findings = verify(intents, settled.state);
    const summary = summarise({
      runId,
      options,
      intents,
      clients: clientStats,
      chaos: chaosStats,
      state: settled.state,
      backlog: settled.backlog,
      findings,
      wallMs: Date.now() - started,
      settleMs: settled.settledMs,
    });
    printSummary(summary, findings);
    const errors = frequentErrors(runDir);
    if (errors.length > 0) {
      console.log('\nmost frequent error lines in the instance logs (kills make some expected):');
      for (const e of errors) console.log(`  ${String(e.count).padStart(5)} × ${e.line}`);
    }
    writeFileSync(
      join(runDir, 'summary.json'),
      JSON.stringify({ summary, findings, errors, chaosLog: chaosStats.log, options }, null, 2),
    );
    if (interrupted) return 2;
    return findings.length > 0 ? 1 : 0;
  } finally {
    await Promise.all(instances.map((i) => i.stop().catch(() => undefined)));
    await provider?.stop(5000).catch(() => undefined);
    await broker.close();
    if (!options.keep) {
      await broker
        .cleanup(`idem-demo-${schema}`)
        .catch((error: unknown) => say(`broker cleanup failed: ${(error as Error).message}`));
      await pool
        .query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE; DROP SCHEMA IF EXISTS "${schema}_demo" CASCADE`)
        .catch((error: unknown) => say(`dropping the schema failed: ${(error as Error).message}`));
      rmSync(join(runDir, 'nats'), { recursive: true, force: true });
    } else {
      say(`kept schema ${schema} (and ${schema}_demo)`);
    }
    await pool.end();
    await embedded?.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error('soak failed to run:', error);
    process.exit(2);
  },
);
