/**
 * The `idem` command as a newcomer meets it, through the real entry point (a child process):
 * `--help` on every command prints its usage and exits 0 without running (no database is reachable
 * here, so a command that ran would fail); unusable arguments are one line and exit 2; database
 * problems are one line that names the setting and the fix, and exit 1.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { describeError } from '../../src/cli/errors.js';
import { databaseUrl } from '../support/database.js';

const main = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
/** Nothing listens on port 1: a command that tried the database would fail, not hang. */
const unreachable = 'postgres://nobody@127.0.0.1:1/none';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function idem(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', main, ...args],
      { env: { ...process.env, DATABASE_URL: unreachable, ...env }, timeout: 60_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** Runs `fn` over `items`, `limit` at a time: every run is a Node process on a 2-core machine. */
async function pooled<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) {
        const index = next++;
        results[index] = await fn(items[index]!);
      }
    }),
  );
  return results;
}

const commands = [
  'migrate',
  'sql',
  'sweep',
  'inspect',
  'example',
  'outbox',
  'demo',
  'console',
  'drill',
  'bench',
];

describe('idem --help', () => {
  it('lists every command', async () => {
    const run = await idem(['--help']);
    expect(run.code).toBe(0);
    const listed = [...run.stdout.matchAll(/^ {2}([a-z-]+) {2}/gm)].map((m) => m[1]);
    expect(listed).toEqual(expect.arrayContaining(commands));
    // A command added to main.ts is checked below too.
    commands.push(...listed.filter((name): name is string => !!name && !commands.includes(name)));
  });

  it('every command answers --help with its usage and exit 0, and runs nothing', async () => {
    const runs = await pooled(commands, 3, async (name) => ({ name, run: await idem([name, '--help']) }));
    for (const { name, run } of runs) {
      expect(run.code, `${name}: ${run.stderr}`).toBe(0);
      expect(run.stdout, name).toMatch(new RegExp(`^usage:(\\n)? +idem ${name}\\b`));
      expect(run.stderr, name).toBe('');
    }
  });
});

describe('usage errors: one line, exit 2', () => {
  it('refuses unknown options and commands, missing values and arguments', async () => {
    const cases: [string[], RegExp][] = [
      [
        ['migrate', '--bogus'],
        /^idem migrate: unknown option '--bogus' \(idem migrate --help shows the usage\)$/,
      ],
      [['demo', '--port'], /^idem demo: option '--port' needs a value/],
      [['demo', '--port', 'x'], /^idem demo: --port must be a whole number/],
      [['inspect', 'acme'], /^idem inspect: missing <operation> <key>/],
      [['outbox'], /^idem outbox: missing command: redrive, stats, dead or cleanup/],
      [['outbox', 'redrive'], /^idem outbox: redrive needs --id, --topic or --all/],
      [['sql', 'extra'], /^idem sql: unexpected argument 'extra'/],
      [['drill'], /^idem drill: --url is required/],
      [['bench', '--fast'], /^idem bench: unknown option '--fast'/],
      [['frobnicate'], /^idem: unknown command 'frobnicate' \(idem --help lists the commands\)$/],
    ];
    const runs = await pooled(cases, 3, async ([args]) => idem(args));
    cases.forEach(([args, expected], i) => {
      const run = runs[i]!;
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr.trimEnd().split('\n'), args.join(' ')).toHaveLength(1);
      expect(run.stderr.trimEnd(), args.join(' ')).toMatch(expected);
    });
  });
});

describe('database problems: one line naming the setting and the fix, exit 1', () => {
  const schema = `idem_unmigrated_${randomBytes(4).toString('hex')}`;
  afterAll(async () => {
    const client = new pg.Client({ connectionString: databaseUrl() });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
  });

  it('names a DATABASE_URL that is not a URL, and one nothing answers on', async () => {
    const [bad, refused] = await Promise.all([
      idem(['migrate'], { DATABASE_URL: 'not-a-url' }),
      idem(['migrate']),
    ]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toBe(
      "idem: DATABASE_URL is not a valid postgres URL: 'not-a-url' (expected postgres://user:password@host:5432/database)\n",
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      'idem: cannot connect to PostgreSQL at 127.0.0.1:1 (DATABASE_URL): connection refused; is the server running?\n',
    );
  });

  it('says to run idem migrate where the tables are missing, console included, before it listens', async () => {
    const env = { DATABASE_URL: databaseUrl() };
    const runs = await pooled(
      [
        ['console', '--port', '0', '--schema', schema],
        ['inspect', 'acme', 'op', 'k', '--schema', schema],
        ['sweep', '--schema', schema],
        ['outbox', 'stats', '--schema', schema],
      ],
      2,
      (args) => idem(args, env),
    );
    for (const run of runs) {
      expect(run.code).toBe(1);
      expect(run.stdout).not.toContain('console on http'); // never listened
      expect(run.stderr).toBe(
        `idem: idem's tables are missing in schema ${schema}: run idem migrate --schema ${schema}\n`,
      );
    }
  });

  it('names a missing optional package with its install command', async () => {
    const name: string = 'an-optional-package-nobody-installed';
    const error: unknown = await import(name).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(describeError(error, 'console')).toBe(
      'idem console needs the package an-optional-package-nobody-installed, which is not installed: npm install an-optional-package-nobody-installed',
    );
  });
});

describe('idem demo outside a checkout', () => {
  it('says the demo is not in the package, and where it is: exit 1, or 0 for --help', async () => {
    // The command as an installed package holds it: the same files (the command and the module
    // that finds the package's root), with no demo/ at that root.
    const root = mkdtempSync(join(tmpdir(), 'idem-installed-'));
    try {
      const commands = join(root, 'package', 'cli', 'commands');
      mkdirSync(commands, { recursive: true });
      mkdirSync(join(root, 'package', 'core'));
      copyFileSync(
        fileURLToPath(new URL('../../src/cli/commands/demo.ts', import.meta.url)),
        join(commands, 'demo.ts'),
      );
      for (const file of ['package-files.ts', 'module-file.ts']) {
        copyFileSync(
          fileURLToPath(new URL(`../../src/core/${file}`, import.meta.url)),
          join(root, 'package', 'core', file),
        );
      }
      writeFileSync(join(root, 'package.json'), '{ "name": "idem", "type": "module" }\n');
      const runner = join(root, 'run.ts');
      writeFileSync(
        runner,
        "import { run } from './package/cli/commands/demo.ts';\nprocess.exitCode = await run(process.argv.slice(2));\n",
      );
      const tsx = new URL('../../node_modules/tsx/dist/loader.mjs', import.meta.url).href;
      const runDemo = (args: string[]) =>
        new Promise<Run>((resolve) => {
          execFile(
            process.execPath,
            ['--import', tsx, runner, ...args],
            { cwd: root },
            (error, stdout, stderr) => {
              resolve({
                code: error ? (typeof error.code === 'number' ? error.code : 1) : 0,
                stdout,
                stderr,
              });
            },
          );
        });
      const [plain, help] = await Promise.all([runDemo([]), runDemo(['--help'])]);
      expect(plain.code).toBe(1);
      expect(plain.stderr).toBe(
        "idem demo: the payments demo is not part of the installed package: it lives in idem's source repository; clone it, then run `npm ci && npm start` there\n",
      );
      expect(help.code).toBe(0);
      expect(help.stdout).toMatch(
        /^usage: idem demo .*\n\nNot available here: the payments demo is not part/,
      );
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
