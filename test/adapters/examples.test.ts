/**
 * The ORM examples (examples/prisma, typeorm, knex, mikro-orm) run as they are, each in its own
 * schema of the real PostgreSQL: the retry is replayed without a second row, and idem joins the
 * caller's own ORM transaction.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { main as knexExample } from '../../examples/knex/main.js';
import { main as mikroOrmExample } from '../../examples/mikro-orm/main.js';
import { main as prismaExample } from '../../examples/prisma/main.js';
import { main as typeormExample } from '../../examples/typeorm/main.js';
import { databaseUrl } from '../support/database.js';

const schemas: string[] = [];
const schemaFor = (name: string) => {
  const schema = `idem_example_${name}_${randomBytes(3).toString('hex')}`;
  schemas.push(schema);
  return schema;
};

afterAll(async () => {
  const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
  for (const schema of schemas) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
});

describe.each([
  ['prisma', prismaExample],
  ['typeorm', typeormExample],
  ['knex', knexExample],
] as const)('examples/%s', (name, main) => {
  it('replays the retry and joins the caller’s own transaction', async () => {
    const result = await main(databaseUrl(), schemaFor(name));
    expect(result.first.replayed).toBe(false);
    expect(result.retry.replayed).toBe(true);
    expect(result.retry.value).toEqual(result.first.value);
    expect(result.inOwn.replayed).toBe(false);
    expect(result.inOwn.value).toMatchObject({ amount: 12, note: 'own transaction' });
    expect(result.orders).toBe(2);
  });
});

describe('examples/mikro-orm', () => {
  it("replays the retry inside MikroORM's own transaction", async () => {
    const result = await mikroOrmExample(databaseUrl(), schemaFor('mikro'));
    expect(result.first.replayed).toBe(false);
    expect(result.retry).toMatchObject({ replayed: true, value: result.first.value });
    expect(result.orders).toBe(1);
  });
});
