import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { isIdemError } from '../../src/core/errors.js';
import { migrate, migrations, migrationScript } from '../../src/migrate/migrate.js';
import { quoteSchema } from '../../src/core/schema-name.js';
import { databaseUrl } from '../support/database.js';

describe('migrations', () => {
  const pools: pg.Pool[] = [];
  const schemas: string[] = [];
  const pool = () => {
    const p = new pg.Pool({ connectionString: databaseUrl(), max: 2 });
    pools.push(p);
    return p;
  };
  afterAll(async () => {
    for (const s of schemas) await pools[0]!.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await Promise.all(pools.map((p) => p.end()));
  });

  it('applies once when six processes migrate at the same time, and re-running is a no-op', async () => {
    const schema = `idem_mig_${randomBytes(4).toString('hex')}`;
    schemas.push(schema);
    const results = await Promise.all(Array.from({ length: 6 }, () => migrate(fromPg(pool()), { schema })));
    const total = migrations(schema).length;
    expect(results.filter((r) => r.applied.length === total)).toHaveLength(1);
    expect(results.filter((r) => r.applied.length === 0)).toHaveLength(5);
    const again = await migrate(fromPg(pool()), { schema });
    expect(again).toEqual({ applied: [], alreadyApplied: total });
    const { rows } = await pools[0]!.query(`SELECT version FROM "${schema}".migrations ORDER BY version`);
    expect(rows.map((r: { version: number }) => r.version)).toEqual(migrations(schema).map((m) => m.version));
  });

  it('prints a plain SQL script that builds the same schema', async () => {
    const schema = `idem_sql_${randomBytes(4).toString('hex')}`;
    schemas.push(schema);
    await pool().query(migrationScript(schema));
    // migrate() recognises what the script applied.
    expect((await migrate(fromPg(pool()), { schema })).applied).toEqual([]);
    const { rows } = await pools[0]!.query(
      `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('requests', 'steps') ORDER BY 1`,
      [schema],
    );
    expect(rows.map((r: { table_name: string }) => r.table_name)).toEqual(['requests', 'steps']);
  });

  it('refuses schema names that could escape quoting', () => {
    for (const bad of ['x"; DROP TABLE t; --', 'Idem', '1abc', '', 'a'.repeat(64), 'a b', 'a-b']) {
      expect(() => quoteSchema(bad), bad).toThrow();
      try {
        quoteSchema(bad);
      } catch (error) {
        expect(isIdemError(error) && error.code).toBe('IDEM_INVALID_ARGUMENT');
      }
    }
    expect(quoteSchema('idem_2')).toBe('"idem_2"');
  });
});
