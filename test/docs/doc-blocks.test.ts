/**
 * Every shell and TypeScript block of the documentation (README.md, CONTRIBUTING.md, every page
 * under docs/, the examples' READMEs) is either run or type-checked here, or says why not in its info string
 * (```sh no-run: <why>```, ```ts no-check: <why>```); nothing is skipped silently.
 * - TypeScript blocks are type-checked with the project's settings (typecheck-blocks.ts); a block
 *   whose first line names a file of examples/ is that file (checked here, leading comments aside),
 *   which `npm run typecheck` compiles and the examples' tests run.
 * - Shell blocks run in bash -e from the repository root, against a demo this test starts (the
 *   documented 127.0.0.1:3000 becomes its address), or, for a block that starts a server itself
 *   (`npm start`, or a command sent to the background with `&`), on free ports and a schema of its
 *   own (PORT, PROVIDER_PORT, IDEM_SCHEMA). Each must exit 0; what it left running is stopped.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomSchema, type DemoHandle } from '../../demo/server.js';
import { databaseUrl } from '../support/database.js';
import { freePort } from '../support/ports.js';
import { dropDemoSchemas, startTestDemo } from '../support/demo.js';
import { codeBlocks, documentationFiles, read, type CodeBlock } from '../support/docs/markdown.js';
import { typecheckBlocks } from '../support/docs/typecheck-blocks.js';

const rootDir = fileURLToPath(new URL('../../', import.meta.url));
const shells = ['sh', 'bash', 'shell', 'console'];
const typescripts = ['ts', 'typescript', 'tsx'];
const exampleFile = /^\/\/ (examples\/[\w/.-]+\.ts)$/;
const where = (b: CodeBlock) => `${b.file}:${b.line}`;

const blocks = documentationFiles().flatMap((file) => codeBlocks(read(file), file));
const shellBlocks = blocks.filter((b) => shells.includes(b.lang));
const tsBlocks = blocks.filter((b) => typescripts.includes(b.lang));
const runnable = shellBlocks.filter((b) => !b.info.startsWith('no-run'));
const checkable = tsBlocks.filter(
  (b) => !b.info.startsWith('no-check') && !exampleFile.test(b.lines[0] ?? ''),
);

describe('documentation blocks', () => {
  it('runs or type-checks every shell and TypeScript block, or the block says why not', () => {
    expect(shellBlocks.length + tsBlocks.length).toBeGreaterThan(40);
    for (const block of shellBlocks) {
      expect(block.info, `${where(block)}: 'no-run: <why>' or nothing`).toMatch(/^(no-run: \S.*)?$/);
    }
    for (const block of tsBlocks) {
      expect(block.info, `${where(block)}: 'no-check: <why>' or nothing`).toMatch(/^(no-check: \S.*)?$/);
    }
    // A block exempted as an example file is that file: its code, leading comment lines aside.
    const code = (lines: string[]) => {
      const first = lines.findIndex((l) => !l.startsWith('//'));
      return lines
        .slice(first < 0 ? lines.length : first)
        .join('\n')
        .trim();
    };
    for (const block of tsBlocks.filter((b) => exampleFile.test(b.lines[0] ?? ''))) {
      const file = exampleFile.exec(block.lines[0]!)![1]!;
      expect(code(block.lines), `${where(block)}: the code of ${file}`).toBe(
        code(readFileSync(`${rootDir}${file}`, 'utf8').split('\n')),
      );
    }
    // The demo guide's commands against the demo are among those that run.
    const demo = 'docs/guide/demo.md';
    expect(runnable.map(where)).toContain(
      where(codeBlocks(read(demo), demo).find((b) => b.lines.some((l) => l.includes('drill')))!),
    );
  });

  it('type-checks every TypeScript block', () => {
    expect(checkable.length).toBeGreaterThan(15);
    const problems = typecheckBlocks(checkable).map((d) => `${d.block.file}:${d.line} ${d.message}`);
    expect(problems).toEqual([]);
  });

  describe('shell blocks against the demo', () => {
    const schema = randomSchema('idem_docs');
    let demo: DemoHandle;
    const report = `${rootDir}drill-report.json`;
    const hadReport = existsSync(report);
    beforeAll(async () => {
      demo = await startTestDemo(schema);
    });
    afterAll(async () => {
      await demo?.close();
      await dropDemoSchemas(schema);
      if (!hadReport) rmSync(report, { force: true }); // written by docs/guide/drill.md's commands
    });

    it.each(runnable.map((block) => [where(block), block] as const))('%s exits 0', async (_name, block) => {
      const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: databaseUrl(), NO_COLOR: '1' };
      delete env.AMQP_URL;
      delete env.NATS_URL;
      let script = block.lines.join('\n');
      const ownSchema = randomSchema('idem_docs');
      if (block.lines.some((line) => /^\s*npm start\b/.test(line) || /(^|[^&])&\s*(#.*)?$/.test(line))) {
        // It starts a server of its own: its own ports and schema.
        const [port, providerPort] = [await freePort(), await freePort()];
        Object.assign(env, {
          PORT: String(port),
          PROVIDER_PORT: String(providerPort),
          IDEM_SCHEMA: ownSchema,
        });
        script = script.replaceAll('127.0.0.1:3000', `127.0.0.1:${port}`);
      } else {
        script = script.replaceAll('http://127.0.0.1:3000', demo.url);
      }
      try {
        const { code, output } = await bash(script, env);
        expect(code, `${where(block)} printed:\n${output}`).toBe(0);
      } finally {
        await dropDemoSchemas(ownSchema);
      }
    });
  });
});

function bash(script: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    // A process group of its own, so what the block sent to the background is stopped with it.
    const child = spawn('bash', ['-e', '-c', script], {
      cwd: rootDir,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('error', reject);
    child.on('exit', () => {
      try {
        process.kill(-child.pid!, 'SIGTERM');
      } catch {
        // Nothing left in the group.
      }
    });
    child.on('close', (code) => resolve({ code, output }));
  });
}
