/**
 * Generates the Prisma clients the tests and examples/prisma import. They are not committed: they
 * belong to the installed Prisma version, and `npm run prisma:generate` (run by `npm run
 * typecheck`, `npm run lint` and the tests' global setup) makes them in about a second each.
 *
 * `prisma generate` checks that the native schema engine binary exists but does not run it, and
 * that binary is downloaded from Prisma's servers, which this machine and CI cannot reach.
 * PRISMA_SCHEMA_ENGINE_BINARY pointing at any existing file lets generate run without it.
 * CHECKPOINT_DISABLE stops the CLI from calling home for update notices.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

/** Every schema in the repository, relative to its root; each generates into `generated/` beside it. */
export const prismaSchemas = ['test/support/prisma/schema.prisma', 'examples/prisma/schema.prisma'];

export function generatePrismaClients(): void {
  const require = createRequire(import.meta.url);
  const cliPackage = require.resolve('prisma/package.json');
  const cli = join(dirname(cliPackage), 'build/index.js');
  const version = (JSON.parse(readFileSync(cliPackage, 'utf8')) as { version: string }).version;
  for (const relative of prismaSchemas) {
    const schema = join(root, relative);
    const stampFile = join(dirname(schema), 'generated', '.schema-stamp');
    const stamp = createHash('sha256').update(version).update(readFileSync(schema)).digest('hex');
    if (existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp) continue;
    execFileSync(process.execPath, [cli, 'generate', '--schema', schema], {
      cwd: root,
      // Quiet unless it fails: execFileSync throws with the CLI's output then.
      stdio: 'pipe',
      env: {
        ...process.env,
        PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY ?? process.execPath,
        CHECKPOINT_DISABLE: '1',
      },
    });
    writeFileSync(stampFile, stamp);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  generatePrismaClients();
}
