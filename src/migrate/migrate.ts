import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { MigrationError } from '../core/errors.js';
import type { Sql } from '../core/sql.js';
import { packagePath } from '../core/package-files.js';
import { defaultSchema, quoteSchema } from '../core/schema-name.js';
import { defineStatement, nothing } from '../core/statement.js';

/** One numbered migration, with `{{schema}}` already replaced. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

// The .sql files ship in the package's migrations/ folder, beside dist/ and src/.
const migrationsDir = () => packagePath('migrations');

/** The migrations, in order, rendered for `schema` (default `idem`). */
export function migrations(schema = defaultSchema): Migration[] {
  const quoted = quoteSchema(schema);
  const dir = migrationsDir();
  return readdirSync(dir)
    .filter((file) => /^\d{4}_[a-z0-9_]+\.sql$/.test(file))
    .sort()
    .map((file) => ({
      version: Number(file.slice(0, 4)),
      name: file.replace(/\.sql$/, ''),
      sql: readFileSync(join(dir, file), 'utf8').replaceAll('{{schema}}', quoted),
    }));
}

/**
 * All migrations as one plain SQL script, for teams that run their own migration tool.
 * It records applied versions in `<schema>.migrations` just as `migrate` does.
 */
export function migrationScript(schema = defaultSchema): string {
  const quoted = quoteSchema(schema);
  const parts = [`CREATE SCHEMA IF NOT EXISTS ${quoted};`, bookkeepingTable(quoted)];
  for (const m of migrations(schema)) {
    parts.push(
      `-- ${m.name}`,
      m.sql.trim(),
      `INSERT INTO ${quoted}.migrations (version, name) VALUES (${m.version}, '${m.name}');`,
    );
  }
  return parts.join('\n\n') + '\n';
}

function bookkeepingTable(quoted: string): string {
  return `CREATE TABLE IF NOT EXISTS ${quoted}.migrations (
  version    integer PRIMARY KEY,
  name       text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);`;
}

/**
 * The migrator's own statements with parameters (the DDL of the migrations stays text). The lock:
 * hashtext gives a stable int4 key; `::text`, because the function returns `void`, which some
 * drivers cannot read (Prisma fails with P2010 UnsupportedNativeDataType); a text column reads
 * everywhere.
 */
const lockMigrations = defineStatement({
  text: `SELECT pg_advisory_xact_lock(hashtext($1))::text AS locked`,
  params: ({ schema }: { schema: string }) => [`idem.migrate:${schema}`],
  result: nothing,
});

/** Records an applied migration in `<schema>.migrations`. */
const recordMigration = (quoted: string) =>
  defineStatement({
    text: `INSERT INTO ${quoted}.migrations (version, name) VALUES ($1, $2)`,
    params: (m: Migration) => [m.version, m.name],
    result: nothing,
  });

/** What `migrate` did. */
export interface MigrateResult {
  applied: string[];
  alreadyApplied: number;
}

/**
 * Applies pending migrations in one transaction, under a transaction-scoped advisory lock keyed by
 * the schema name: several processes may call this at once, and it may be re-run at any time.
 */
export async function migrate(sql: Sql, options: { schema?: string } = {}): Promise<MigrateResult> {
  const schema = options.schema ?? defaultSchema;
  const quoted = quoteSchema(schema);
  const all = migrations(schema);
  try {
    return await sql.transaction(async (tx) => {
      // A migration may rewrite or index a large table, and waits for the lock below as long as
      // another migrator runs: the statement bound the adapter gives idem's transactions (10 s)
      // is lifted for this one. The lock serialises concurrent migrators; released at COMMIT.
      await tx.query(`SELECT set_config('statement_timeout', '0', true)::text AS unbounded`);
      await lockMigrations(tx, { schema });
      await tx.query(`CREATE SCHEMA IF NOT EXISTS ${quoted}`);
      await tx.query(bookkeepingTable(quoted));
      const { rows } = await tx.query<{ version: number }>(`SELECT version FROM ${quoted}.migrations`);
      const done = new Set(rows.map((r) => Number(r.version)));
      const applied: string[] = [];
      const record = recordMigration(quoted);
      for (const m of all) {
        if (done.has(m.version)) continue;
        await tx.query(m.sql);
        await record(tx, m);
        applied.push(m.name);
      }
      return { applied, alreadyApplied: done.size };
    });
  } catch (error) {
    throw new MigrationError(`migrating schema ${schema} failed: ${(error as Error).message}`, error);
  }
}
