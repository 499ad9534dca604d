/**
 * Runs the crash drill's child process and reports what it did before dying. The child
 * (crash-child.ts) is a real Node process killed with SIGKILL: no `finally`, no exit hook, no
 * flushed buffer; PostgreSQL sees its connections drop and Redis keeps whatever it had written.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Recording } from '../../src/operations/options.js';
import type { Answer } from './variant.js';

export interface CrashChildInput {
  databaseUrl: string;
  redisUrl: string;
  schema: string;
  namespace: string;
  /** Variant id → the key its one request uses. */
  keys: Record<string, string>;
  inProgressMs: number;
  /** How idem's variants record their keys in the child. */
  recording?: Recording;
}

export interface CrashChildReport {
  /** Variants whose request ended before reaching the crash point, with their answer. */
  failed: Record<string, Answer>;
}

const repositoryRoot = fileURLToPath(new URL('../../', import.meta.url));
const childPath = fileURLToPath(new URL('./crash-child.ts', import.meta.url));

export async function runCrashChild(input: CrashChildInput, timeoutMs = 60_000): Promise<CrashChildReport> {
  const child = spawn(process.execPath, ['--import', 'tsx', childPath, JSON.stringify(input)], {
    cwd: repositoryRoot,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (c, s) => resolve([c, s]));
  }).finally(() => clearTimeout(timer));
  const failed: Record<string, Answer> = {};
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{')) continue;
    const { variant, answer } = JSON.parse(line) as { variant: string; answer: Answer };
    failed[variant] = answer;
  }
  if (signal !== 'SIGKILL' || stdout.includes('"watchdog"')) {
    throw new Error(
      `the crash drill's child did not crash at the write (exit ${code ?? signal}):\n${stdout}${stderr}`,
    );
  }
  return { failed };
}
