/** `idem bench [--quick] [--only name]… [--merge]`: runs the benchmark suite in bench/ (a checkout of the repository). */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { packagePath } from '../../core/package-files.js';
import { parseCommand } from '../args.js';

const usage = `usage: idem bench [--quick] [--only NAME]… [--merge]

Runs the benchmarks (not tests) from a checkout of the idem repository, and writes
bench/results/latest.json and bench/report.md. DATABASE_URL, AMQP_URL, NATS_URL and REDIS_URL
pick the services; without DATABASE_URL it starts an embedded PostgreSQL.

  --quick       short runs, for a smoke check (the figures are not the report's)
  --only NAME   run one module: operations, http, messaging, webhooks, claims, scaling, peers
                (repeat for more)
  --merge       with --only: replace only those sections in the existing latest.json`;

export async function run(argv: string[]): Promise<number> {
  const args = parseCommand('bench', usage, argv, {
    quick: { type: 'boolean' },
    only: { type: 'string', multiple: true },
    merge: { type: 'boolean' },
  });
  if (args.exitCode !== undefined) return args.exitCode;
  const runner = packagePath('bench', 'run.ts');
  if (!existsSync(runner)) {
    console.error('idem bench runs from a checkout of the idem repository (bench/ is not in the package)');
    return 2;
  }
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', runner, ...argv], { stdio: 'inherit' });
    child.on('close', (code) => resolve(code ?? 1));
  });
}
