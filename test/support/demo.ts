import { startDemo, type DemoHandle, type DemoOverrides } from '../../demo/server.js';
import { databaseUrl } from './database.js';
import { dropDemoSchemasAt } from './faults/demo-under-fault.js';

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

/** Drops what a demo created on the test database: idem's schema and the demo's own tables. */
export function dropDemoSchemas(schema: string): Promise<void> {
  return dropDemoSchemasAt(databaseUrl(), schema);
}
