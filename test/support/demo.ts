import pg from 'pg';
import { startDemo, type DemoHandle, type DemoOverrides } from '../../demo/server.js';
import { databaseUrl } from './database.js';

/**
 * Starts the payments demo for a test: the test database under `schema`, ephemeral ports for the
 * demo and its fake provider (started in this process). Anything else — the transport, the
 * console — comes from `overrides`, or from the environment as `npm start` reads it.
 */
export function startTestDemo(schema: string, overrides: DemoOverrides = {}): Promise<DemoHandle> {
  return startDemo({
    databaseUrl: databaseUrl(),
    schema,
    port: 0,
    providerPort: 0,
    providerUrl: undefined,
    ...overrides,
  });
}

/** Drops what a demo created: idem's schema and the demo's own tables (`<schema>_demo`). */
export async function dropDemoSchemas(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  try {
    await client.query(
      `DROP SCHEMA IF EXISTS "${schema}" CASCADE; DROP SCHEMA IF EXISTS "${schema}_demo" CASCADE`,
    );
  } finally {
    await client.end();
  }
}
