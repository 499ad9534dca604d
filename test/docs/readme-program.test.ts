/**
 * The README's program runs when pasted: its first code block is that program (library code, not a
 * command), the getting-started guide shows the same program, and run twice with tsx against a
 * database of its own (as a user runs it: `DATABASE_URL` set, nothing else), the first run executes
 * and the second replays, with one order in the table after both; then the README's `idem trace`
 * command, run against that database, prints the order's timeline. The README stays a front door:
 * at most 200 lines.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { databaseUrl } from '../support/database.js';
import { codeBlocks, read } from '../support/docs/markdown.js';

const rootDir = fileURLToPath(new URL('../../', import.meta.url));
const readme = read('README.md');
const program = codeBlocks(readme, 'README.md')[0]!;
const traceCommand = codeBlocks(readme, 'README.md')
  .flatMap((block) => block.lines)
  .find((line) => line.startsWith('npx idem trace '));
const cliMain = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));

describe('the README', () => {
  it('is at most 200 lines', () => {
    expect(readme.trimEnd().split('\n').length).toBeLessThanOrEqual(200);
  });

  it('opens with library code: a TypeScript program, type-checked with the other blocks', () => {
    expect(program.lang).toBe('ts');
    expect(program.info).toBe('');
    expect(program.lines.join('\n')).toMatch(/from 'idem'/);
    expect(program.lines.join('\n')).toMatch(/idem\.run\(/);
  });

  it('shows the same program as the getting-started guide', () => {
    const guide = codeBlocks(read('docs/guide/getting-started.md'), 'docs/guide/getting-started.md');
    expect(guide.some((block) => block.lines.join('\n') === program.lines.join('\n'))).toBe(true);
  });
});

describe("the README's program, run twice", () => {
  const database = `idem_readme_${randomBytes(4).toString('hex')}`;
  // Inside the repository, so `idem` resolves through tsconfig's paths (to src) as in the examples.
  const dir = `${rootDir}.idem/readme-program-${process.pid}`;
  const file = `${dir}/first.mts`;
  let admin: pg.Client;
  let url: string;

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: databaseUrl() });
    await admin.connect();
    await admin.query(`CREATE DATABASE "${database}"`);
    const target = new URL(databaseUrl());
    target.pathname = `/${database}`;
    url = target.toString();
    mkdirSync(dir, { recursive: true });
    writeFileSync(file, `${program.lines.join('\n')}\n`);
  });

  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    if (admin) {
      await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
      await admin.end();
    }
  });

  it('executes on the first run and replays on the second, with one order', async () => {
    const first = await tsx(file, url);
    expect(first.code, first.output).toBe(0);
    expect(first.stdout.trim()).toBe('executed { orderId: 1 } { orders: 1 }');
    const second = await tsx(file, url);
    expect(second.code, second.output).toBe(0);
    expect(second.stdout.trim()).toBe('replayed { orderId: 1 } { orders: 1 }');
    const check = new pg.Client({ connectionString: url });
    await check.connect();
    try {
      const { rows } = await check.query('SELECT count(*)::int AS n FROM orders');
      expect(rows).toEqual([{ n: 1 }]);
      const keys = await check.query(
        "SELECT state FROM idem.requests WHERE tenant_id = 'acme' AND operation = 'place-order'",
      );
      expect(keys.rows).toEqual([{ state: 'completed' }]);
    } finally {
      await check.end();
    }
  });

  it("then the README's trace command prints that order's timeline", async () => {
    expect(traceCommand).toBeDefined();
    // `npx idem` of an installed package is the CLI's source here; arguments as the README has them.
    const args = traceCommand!.replace(/#.*$/, '').trim().split(/\s+/).slice(2);
    expect(args).toEqual(['trace', 'acme', 'place-order', 'order-1001']);
    const human = await tsx(cliMain, url, args);
    expect(human.code, human.output).toBe(0);
    expect(human.stdout).toMatch(/^intent acme\/place-order\/order-1001 /);
    expect(human.stdout).toMatch(/request +completed/);
    const json = await tsx(cliMain, url, [...args, '--json']);
    expect(json.code, json.output).toBe(0);
    const timeline = JSON.parse(json.stdout) as { intent: { ref: string }; items: { kind: string }[] };
    expect(timeline.intent.ref).toBe('acme/place-order/order-1001');
    expect(timeline.items.map((item) => item.kind)).toEqual(['request']);
  });
});

function tsx(
  path: string,
  url: string,
  args: string[] = [],
): Promise<{ code: number | null; stdout: string; output: string }> {
  return new Promise((resolve, reject) => {
    const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: url, NO_COLOR: '1' };
    const child = spawn(process.execPath, ['--import', 'tsx', path, ...args], {
      cwd: rootDir,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, output }));
  });
}
