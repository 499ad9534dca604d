/**
 * A row type may be an interface (`tx.query<Order>(…)`), as with node-postgres's own
 * `query<Order>`: `Row` once was `Record<string, unknown>`, which an interface does not satisfy
 * (TS2344, no index signature). Without a type argument a row is still `Record<string, unknown>`.
 * Compiled by `npm run typecheck`; run against the real PostgreSQL.
 */
import { afterAll, beforeAll, expect, expectTypeOf, it } from 'vitest';
import type { QueryResult, Row } from 'idem';
import { fromPg } from 'idem/pg';
import { createTestSchema, type TestSchema } from '../support/database.js';

interface Order {
  id: string;
  total: number;
  note: string | null;
}

let db: TestSchema;
beforeAll(async () => {
  db = await createTestSchema({ poolSize: 2 });
});
afterAll(() => db.close());

it('takes an interface as the row type, on the pool and in a transaction', async () => {
  const sql = fromPg(db.pool);
  const select = 'SELECT 7::text AS id, 40 AS total, NULL::text AS note';
  const { rows } = await sql.query<Order>(select);
  expectTypeOf(rows).toEqualTypeOf<Order[]>();
  expect(rows).toEqual([{ id: '7', total: 40, note: null }]);
  const inTransaction = await sql.transaction(async (tx) => (await tx.query<Order>(select)).rows[0]);
  expectTypeOf(inTransaction).toEqualTypeOf<Order | undefined>();
  expect(inTransaction?.total).toBe(40);
  expectTypeOf<Order>().toExtend<Row>();
});

it('types a row read without a type argument as Record<string, unknown>', async () => {
  const result = await fromPg(db.pool).query('SELECT 1 AS n');
  expectTypeOf(result).toEqualTypeOf<QueryResult<Record<string, unknown>>>();
  expectTypeOf(result.rows[0]!.n).toBeUnknown();
  expect(result.rows[0]!.n).toBe(1);
});
