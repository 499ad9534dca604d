#!/usr/bin/env node
/**
 * The `idem` command. Each subcommand lives in `commands/<name>.ts` and is loaded only when used,
 * so `idem sql` never loads a broker client. A new command is one line in `commands` below.
 * Every command answers `--help` with its usage (exit 0); a usage error is one line and exit 2; a
 * failure is one line (errors.ts), never a stack trace, and exit 1.
 */
import { readFileSync } from 'node:fs';
import { packagePath } from '../core/package-files.js';
import { describeError } from './errors.js';

type CommandModule = { run(argv: string[]): Promise<number> };
// A computed specifier: commands are separate chunks, loaded on demand.
const load = (name: string): Promise<CommandModule> =>
  import(`./commands/${name}.js`) as Promise<CommandModule>;

const commands: Record<string, { summary: string; load: () => Promise<CommandModule> }> = {
  migrate: { summary: 'apply idem migrations to DATABASE_URL', load: () => load('migrate') },
  sql: { summary: 'print the migrations as plain SQL', load: () => load('sql') },
  sweep: { summary: 'delete what outlived its retention in every idem table', load: () => load('sweep') },
  inspect: { summary: 'show one key: idem inspect <tenant> <operation> <key>', load: () => load('inspect') },
  trace: {
    summary: "one intent's timeline: idem trace <tenant> <operation> <key> | --message ID | --derived-key K",
    load: () => load('trace'),
  },
  example: { summary: 'run a small keyed-operation example end to end', load: () => load('example') },
  outbox: { summary: 'outbox tools: idem outbox redrive [--topic T] [--id ID]', load: () => load('outbox') },
  intents: {
    summary: 'abandoned defined operations: idem intents list | give-up --compensate|--fail',
    load: () => load('intents'),
  },
  webhooks: {
    summary: 'webhook tools: idem webhooks parked | skip --scope S --key K',
    load: () => load('webhooks'),
  },
  demo: { summary: 'run the payments demo (from a checkout of the repository)', load: () => load('demo') },
  console: { summary: 'serve the operator console for DATABASE_URL', load: () => load('console') },
  drill: { summary: 'run conformance drills against an Idempotency-Key endpoint', load: () => load('drill') },
  bench: { summary: 'run the benchmark suite', load: () => load('bench') },
};

function usage(): string {
  const width = Math.max(...Object.keys(commands).map((c) => c.length));
  return [
    'usage: idem <command> [options]',
    '',
    ...Object.entries(commands).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`),
    '',
    'idem <command> --help shows the options of one command.',
    'The database is DATABASE_URL; most commands take --schema <name> (default idem).',
  ].join('\n');
}

function version(): string {
  const manifest = packagePath('package.json');
  return (JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version;
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === '--help' || name === '-h' || name === 'help') {
    console.log(usage());
    return 0;
  }
  if (name === '--version' || name === '-v') {
    console.log(version());
    return 0;
  }
  if (!name) {
    console.error(usage());
    return 2;
  }
  const command = Object.hasOwn(commands, name) ? commands[name] : undefined;
  if (!command) {
    console.error(`idem: unknown command '${name}' (idem --help lists the commands)`);
    return 2;
  }
  try {
    return await (await command.load()).run(rest);
  } catch (error) {
    console.error(`idem: ${describeError(error, name)}`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
