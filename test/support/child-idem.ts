/** For a test's child process (no vitest there): idem from the environment the test gives it. */
import pg from 'pg';
import { fromPg } from 'idem/pg';
import { createIdem, type Idem } from 'idem';

/**
 * idem on DATABASE_URL (two connections) in SCHEMA, with LEASE_MS (or `leaseMs`) as its lease and
 * `waitMs` when given; `pool` is its connections, for the child to end.
 */
export function childIdem(leaseMs: number, waitMs?: number): { idem: Idem; pool: pg.Pool } {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
  const idem = createIdem({
    sql: fromPg(pool),
    schema: process.env.SCHEMA!,
    leaseMs: Number(process.env.LEASE_MS ?? leaseMs),
    ...(waitMs === undefined ? {} : { waitMs }),
  });
  return { idem, pool };
}
