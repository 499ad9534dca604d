#!/usr/bin/env node
/**
 * The `idem` command. Each subcommand lives in `commands/<name>.ts` and is loaded only when used,
 * so `idem sql` never loads a broker client.
 */

type CommandModule = { run(argv: string[]): Promise<number> };
// A computed specifier: commands are separate chunks, loaded on demand.
const load = (name: string): Promise<CommandModule> =>
  import(`./commands/${name}.js`) as Promise<CommandModule>;

const commands: Record<string, { summary: string; load: () => Promise<CommandModule> }> = {
  migrate: { summary: 'apply idem migrations to DATABASE_URL', load: () => load('migrate') },
  sql: { summary: 'print the migrations as plain SQL', load: () => load('sql') },
  sweep: { summary: 'delete what outlived its retention in every idem table', load: () => load('sweep') },
  inspect: { summary: 'show one key: idem inspect <tenant> <operation> <key>', load: () => load('inspect') },
  example: { summary: 'run a small keyed-operation example end to end', load: () => load('example') },
  outbox: { summary: 'outbox tools: idem outbox redrive [--topic T] [--id ID]', load: () => load('outbox') },
  webhooks: {
    summary: 'webhook tools: idem webhooks parked | skip --scope S --key K',
    load: () => load('webhooks'),
  },
  demo: { summary: 'run the payments demo service', load: () => load('demo') },
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
    'Common options: --schema <name> (default idem). The database is DATABASE_URL.',
  ].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(usage());
    return name ? 0 : 1;
  }
  const command = commands[name];
  if (!command) {
    console.error(`idem: unknown command '${name}'\n\n${usage()}`);
    return 2;
  }
  let module: Awaited<ReturnType<typeof command.load>>;
  try {
    module = await command.load();
  } catch (error) {
    if ((error as { code?: string }).code === 'ERR_MODULE_NOT_FOUND') {
      console.error(`idem: '${name}' is not available in this build`);
      return 2;
    }
    throw error;
  }
  return module.run(rest);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(`idem: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  },
);
