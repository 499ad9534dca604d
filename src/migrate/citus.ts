/**
 * The Citus distribution of idem's schema (`idem sql --citus`): every table that holds per-tenant
 * data is distributed on `tenant_id`, all colocated, so a tenant's keys, events, receipts and
 * tasks sit on one node and every statement pinned to a tenant is routed to one shard. Run it once,
 * after the migrations, on the coordinator. Not tried here (no Citus can be installed on these
 * machines): what is checked on plain PostgreSQL is that the schema allows it
 * (test/scale-out/distribution.test.ts) and that this list names every table.
 */
import { quoteSchema } from '../core/schema-name.js';

/**
 * Every table of the schema but the migrations bookkeeping, in an order where a table comes after
 * the tables its foreign keys reference (Citus distributes the referenced table first).
 */
export const distributedTables = [
  'requests',
  'steps',
  'intents',
  'inbox',
  'outbox',
  'webhook_receipts',
  'webhook_entity_versions',
  'webhook_entity_skips',
  'webhook_endpoints',
  'webhook_messages',
  'webhook_deliveries',
  'webhook_delivery_attempts',
  'tasks',
  'task_keys',
  'sagas',
  'saga_steps',
] as const;

/** The distribution DDL for `schema`, as a SQL script to run after the migrations. */
export function citusScript(schema: string): string {
  const s = quoteSchema(schema);
  const [first, ...rest] = distributedTables;
  return `${[
    `-- Citus: distribute idem's tables on tenant_id, colocated with ${schema}.${first}.`,
    '-- Every primary key, unique constraint and foreign key of these tables includes tenant_id.',
    `-- ${s}.migrations stays a local table on the coordinator: only the migrator reads it.`,
    '-- Run workers with the `tenants` option (dispatcher, processor, sender, claims worker, sweeps):',
    '-- their statements are then pinned to one tenant each, as Citus routes them to one shard.',
    `SELECT create_distributed_table('${s}.${first}', 'tenant_id');`,
    ...rest.map(
      (table) =>
        `SELECT create_distributed_table('${s}.${table}', 'tenant_id', colocate_with => '${s}.${first}');`,
    ),
  ].join('\n')}\n`;
}
