/**
 * Argument parsing shared by every `idem` command (node's `util.parseArgs`): `--help`/`-h` prints
 * the command's usage and exits 0 without running anything; an unknown option, a missing value or
 * a stray argument is one line on stderr and exit code 2.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';

type Options = NonNullable<ParseArgsConfig['options']>;
type Config<O extends Options> = {
  args: string[];
  options: O & { help: { type: 'boolean'; short: 'h' } };
  allowPositionals: true;
  strict: true;
};

/** What `parseCommand` found: the values, or the exit code when the command must not run. */
export type Parsed<O extends Options> =
  ({ exitCode?: undefined } & ReturnType<typeof parseArgs<Config<O>>>) | { exitCode: number };

/**
 * Parses `argv` for `idem <command>`. With `--help` it prints `usage` and returns exit code 0;
 * for unusable arguments it prints one line and returns 2. `maxPositionals` (default 0) bounds
 * the bare arguments.
 */
export function parseCommand<const O extends Options>(
  command: string,
  usage: string,
  argv: string[],
  options: O,
  maxPositionals = 0,
): Parsed<O> {
  let parsed;
  try {
    const config: Config<O> = {
      args: argv,
      options: { ...options, help: { type: 'boolean', short: 'h' } },
      allowPositionals: true,
      strict: true,
    };
    parsed = parseArgs(config);
  } catch (error) {
    // `--help` anywhere wins over a mistake elsewhere on the line.
    if (argv.includes('--help') || argv.includes('-h')) return { exitCode: printUsage(usage) };
    return { exitCode: usageError(command, argumentProblem((error as Error).message)) };
  }
  if ((parsed.values as { help?: boolean }).help) return { exitCode: printUsage(usage) };
  const extra = parsed.positionals[maxPositionals];
  if (extra !== undefined) return { exitCode: usageError(command, `unexpected argument '${extra}'`) };
  return parsed;
}

/**
 * Parses `idem <command> <subcommand> [options]`: like `parseCommand`, and the one bare argument
 * must name one of `subcommands` (a missing or unknown one is a usage error that lists them).
 */
export function parseSubcommand<const O extends Options, const S extends string>(
  command: string,
  usage: string,
  argv: string[],
  subcommands: readonly [S, ...S[]],
  options: O,
):
  | { exitCode: number }
  | { exitCode?: undefined; subcommand: S; values: ReturnType<typeof parseArgs<Config<O>>>['values'] } {
  const args = parseCommand(command, usage, argv, options, 1);
  if (args.exitCode !== undefined) return args;
  const names =
    subcommands.length === 1
      ? subcommands[0]
      : `${subcommands.slice(0, -1).join(', ')} or ${subcommands.at(-1)}`;
  const [subcommand] = args.positionals;
  if (!subcommand) return { exitCode: usageError(command, `missing command: ${names}`) };
  if (!(subcommands as readonly string[]).includes(subcommand)) {
    return { exitCode: usageError(command, `unknown command '${subcommand}': ${names}`) };
  }
  return { subcommand: subcommand as S, values: args.values };
}

function printUsage(usage: string): number {
  console.log(usage.trimEnd());
  return 0;
}

/** Prints `idem <command>: <problem> (idem <command> --help shows the usage)` and returns 2. */
export function usageError(command: string, problem: string): number {
  const name = command ? `idem ${command}` : 'idem';
  console.error(`${name}: ${problem} (${name} --help shows the usage)`);
  return 2;
}

/** node's parseArgs messages, shortened to what a person needs. */
export function argumentProblem(message: string): string {
  const option = "'(?:-\\w, )?(-{1,2}[\\w-]+)(?: <value>)?'";
  const rules: [RegExp, (m: RegExpExecArray) => string][] = [
    [/^Unknown option '([^']+)'/, (m) => `unknown option '${m[1]}'`],
    [new RegExp(`^Option ${option} argument missing`), (m) => `option '${m[1]}' needs a value`],
    [new RegExp(`^Option ${option} does not take an argument`), (m) => `option '${m[1]}' takes no value`],
    [/^Unexpected argument '([^']+)'/, (m) => `unexpected argument '${m[1]}'`],
  ];
  for (const [pattern, say] of rules) {
    const match = pattern.exec(message);
    if (match) return say(match);
  }
  return message.split('\n')[0]!;
}

/** A whole number option within bounds, or a message saying what is wrong with it. */
export function integerOption(
  name: string,
  value: string,
  min = 0,
  max = Number.MAX_SAFE_INTEGER,
): number | string {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || n < min || n > max) {
    return `--${name} must be a whole number from ${min} to ${max}, not '${value}'`;
  }
  return n;
}
