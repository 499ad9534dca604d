/** `idem bench [--quick] [--only name]`: runs the benchmark suite in bench/ (a checkout of the repository). */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export async function run(argv: string[]): Promise<number> {
  const runner = fileURLToPath(new URL('../../../bench/run.ts', import.meta.url));
  if (!existsSync(runner)) {
    console.error('idem bench runs from a checkout of the idem repository (bench/ is not in the package)');
    return 2;
  }
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', runner, ...argv], { stdio: 'inherit' });
    child.on('close', (code) => resolve(code ?? 1));
  });
}
