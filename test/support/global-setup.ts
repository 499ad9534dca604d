import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedDatabase } from './embedded.js';
import { findPgBouncer, startPgBouncer, type PgBouncer } from './pgbouncer.js';
import { generatePrismaClients } from './prisma/generate.js';

let embedded: EmbeddedDatabase | undefined;
let bouncer: PgBouncer | undefined;

/** Uses DATABASE_URL when set; otherwise starts an embedded PostgreSQL for the whole run. */
export async function setup(project: TestProject): Promise<void> {
  // The Prisma tests import generated clients (not committed); skipped when already up to date.
  generatePrismaClients();
  let url = process.env.DATABASE_URL;
  if (!url) {
    if (process.env.CI) throw new Error('CI must set DATABASE_URL to the real PostgreSQL');
    console.warn(
      '[idem tests] DATABASE_URL is not set: starting an embedded PostgreSQL under .idem/test-postgres',
    );
    try {
      embedded = await startEmbeddedPostgres({ dir: '.idem/test-postgres', persistent: false });
    } catch (error) {
      // One line, as `npm start` says it (a second `npm test` in the same folder, say), not a
      // stack trace from the runner; nothing has started yet.
      console.error(`[idem tests] ${(error as Error).message}`);
      process.exit(1);
    }
    url = embedded.url;
  }
  project.provide('databaseUrl', url);
  // One PgBouncer in transaction mode for the whole run: the core contract suite runs through it
  // once (test/support/adapters.ts). Its absence is reported by the files that need it.
  const binary = findPgBouncer();
  if (binary) {
    try {
      bouncer = await startPgBouncer(binary, { targetUrl: url, poolSize: 10 });
    } catch (error) {
      if (process.env.CI) throw error;
      console.warn(
        `[idem tests] pgbouncer did not start, SKIPPING the contract suite through it: ${String(error)}`,
      );
    }
  }
  project.provide('pgbouncerUrl', bouncer?.url ?? '');
}

export async function teardown(): Promise<void> {
  await bouncer?.stop();
  await embedded?.stop();
}

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
    /** The database through a PgBouncer in transaction mode; empty when pgbouncer is not installed. */
    pgbouncerUrl: string;
  }
}
