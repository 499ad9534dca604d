/**
 * `npm run bench [-- --quick] [-- --only name] [-- --merge]`: runs every benchmark module, then
 * writes bench/results/latest.json and bench/report.md (with charts). `--only a --merge` re-runs
 * module `a` and replaces only its section in the existing latest.json (same mode), so one module
 * can be measured again without re-running the whole suite; the report says which and when.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { measureCommitLatencyMs } from './lib/commit-latency.js';
import { writeReport, type BenchResults } from './lib/report.js';
import type { BenchContext, BenchModule, BenchSection } from './lib/types.js';

const modules: Record<string, () => Promise<{ default: BenchModule }>> = {
  operations: () => import('./operations.bench.js'),
};
for (const name of [
  'http',
  'messaging',
  'webhooks',
  'claims',
  'steps',
  'scaling',
  'peers',
  'pooler',
  'causation',
  'dbos',
]) {
  const file = new URL(`./${name}.bench.ts`, import.meta.url);
  if (existsSync(file)) modules[name] = () => import(file.href) as Promise<{ default: BenchModule }>;
}

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string', multiple: true },
    merge: { type: 'boolean', default: false },
  },
});

async function main(): Promise<void> {
  let databaseUrl = process.env.DATABASE_URL;
  let stop: (() => Promise<void>) | undefined;
  if (!databaseUrl) {
    const { startEmbeddedPostgres } = await import('../src/embedded/embedded-postgres.js');
    console.log('DATABASE_URL is not set: benchmarking on an embedded PostgreSQL');
    const embedded = await startEmbeddedPostgres({ dir: '.idem/bench-postgres', persistent: false });
    databaseUrl = embedded.url;
    stop = () => embedded.stop();
  }
  const context: BenchContext = {
    databaseUrl,
    amqpUrl: process.env.AMQP_URL,
    natsUrl: process.env.NATS_URL,
    redisUrl: process.env.REDIS_URL,
    quick: values.quick ?? false,
    log: (message) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${message}`),
  };
  const selected = Object.entries(modules).filter(([name]) => !values.only || values.only.includes(name));
  const sections: BenchSection[] = [];
  const commitLatencyMs = await measureCommitLatencyMs(databaseUrl);
  context.log(`commit latency (one durable commit, median of 200): ${commitLatencyMs} ms`);
  const started = Date.now();
  for (const [name, load] of selected) {
    context.log(`▶ ${name}`);
    try {
      sections.push(await (await load()).default(context));
    } catch (error) {
      console.error(`benchmark ${name} failed:`, error);
      sections.push({ name, figures: [], notes: [`FAILED: ${(error as Error).message}`] });
    }
  }
  const durationSeconds = Math.round((Date.now() - started) / 1000);
  const latest = new URL('./results/latest.json', import.meta.url);
  if (values.merge) {
    const previous = JSON.parse(readFileSync(latest, 'utf8')) as BenchResults;
    if (previous.mode !== (context.quick ? 'quick' : 'full')) {
      throw new Error(`--merge: latest.json is a ${previous.mode}-mode run; re-run in the same mode`);
    }
    const date = new Date().toISOString();
    for (const section of sections) {
      const at = previous.sections.findIndex((s) => s.name === section.name);
      if (at >= 0) previous.sections[at] = section;
      else previous.sections.push(section);
      previous.merged = [
        ...(previous.merged ?? []).filter((m) => m.section !== section.name),
        { section: section.name, date, durationSeconds, commitLatencyMs },
      ];
    }
    writeFileSync(latest, JSON.stringify(previous, null, 2) + '\n');
    await writeReport(previous, databaseUrl);
    console.log(`\nmerged ${sections.length} section(s) into bench/results/latest.json and bench/report.md`);
    await stop?.();
    return;
  }
  const results = {
    date: new Date().toISOString(),
    mode: context.quick ? 'quick' : 'full',
    durationSeconds,
    machine: {
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model,
      memoryGiB: Math.round(os.totalmem() / 2 ** 30),
      node: process.version,
      platform: `${os.platform()} ${os.release()}`,
      commitLatencyMs,
    },
    sections,
  };
  mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
  writeFileSync(latest, JSON.stringify(results, null, 2) + '\n');
  await writeReport(results, databaseUrl);
  console.log(`\nwrote bench/results/latest.json and bench/report.md in ${durationSeconds} s`);
  await stop?.();
}

await main();
