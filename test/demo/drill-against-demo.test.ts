/**
 * `idem drill` against the payments demo, as a real child process: every drill must pass, with
 * the effect counted through the demo's own list endpoint.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomSchema, type DemoHandle } from '../../demo/server.js';
import { dropDemoSchemas, startTestDemo } from '../support/demo.js';

describe('idem drill against the payments demo', () => {
  let demo: DemoHandle;
  const schema = randomSchema();

  beforeAll(async () => {
    demo = await startTestDemo(schema);
  });
  afterAll(async () => {
    await demo.close();
    await dropDemoSchemas(schema);
  });

  it('passes every drill', async () => {
    const customer = `drill_${randomUUID().slice(0, 8)}`;
    const args = [
      '--import',
      'tsx',
      'src/cli/main.ts',
      'drill',
      '--url',
      `${demo.url}/v1/payments`,
      '--header',
      'Authorization: Bearer sk_test_drill',
      '--second-credential',
      'Authorization: Bearer sk_test_drill_other',
      '--body',
      JSON.stringify({ amount: 1250, currency: 'usd', customer }),
      '--require-key',
      '--count-url',
      `/v1/payments?customer=${customer}`,
      '--concurrency',
      '20',
      '--json',
      '-',
    ];
    const { code, stdout, stderr } = await new Promise<{
      code: number | null;
      stdout: string;
      stderr: string;
    }>((resolve, reject) => {
      const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      child.stdout.on('data', (c: Buffer) => (out += c.toString()));
      child.stderr.on('data', (c: Buffer) => (err += c.toString()));
      child.on('error', reject);
      child.on('close', (exitCode) => resolve({ code: exitCode, stdout: out, stderr: err }));
    });
    const report = JSON.parse(stdout) as { ok: boolean; drills: { name: string; status: string }[] };
    expect(
      report.drills.map((r) => [r.name, r.status]),
      stderr,
    ).toEqual(report.drills.map((r) => [r.name, 'passed']));
    expect(report.drills).toHaveLength(6);
    expect(report.ok).toBe(true);
    expect(code).toBe(0);
  });
});
