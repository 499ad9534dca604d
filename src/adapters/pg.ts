/**
 * node-postgres adapter. `fromPg(pool)` for a pool idem opens transactions on; `fromPgClient(client)`
 * for a client already inside the caller's transaction.
 *
 * @example
 * const idem = createIdem({ sql: fromPg(pool) });
 * // or, inside your own transaction:
 * await client.query('BEGIN');
 * await idem.runIn(fromPgClient(client), spec, async (tx) => { ... });
 * await client.query('COMMIT');
 */
import type { PoolClient } from 'pg';
import type { QueryResult, Row, Sql, Transaction } from '../core/sql.js';

/** The subset of `pg.Pool` idem uses (types only: the core never loads `pg`). */
export interface PgPoolLike<C extends PgClientLike = PoolClient> {
  query(text: string, params?: unknown[]): Promise<{ rows: unknown[]; rowCount: number | null }>;
  connect(): Promise<C & { release(error?: Error | boolean): void }>;
}

/** The subset of `pg.Client` / `pg.PoolClient` idem uses. */
export interface PgClientLike {
  query(text: string, params?: unknown[]): Promise<{ rows: unknown[]; rowCount: number | null }>;
}

async function run<R extends Row>(
  db: PgClientLike,
  text: string,
  params?: readonly unknown[],
): Promise<QueryResult<R>> {
  const raw = await db.query(text, params as unknown[] | undefined);
  // Several statements without parameters (a migration file) come back as an array of results.
  const result = Array.isArray(raw) ? (raw.at(-1) as typeof raw) : raw;
  return { rows: result.rows as R[], rowCount: result.rowCount ?? result.rows.length };
}

/** A transaction on a client the caller already began. Idem will not BEGIN or COMMIT it. */
export function fromPgClient<C extends PgClientLike>(client: C): Transaction<C> {
  return { client, query: (text, params) => run(client, text, params) };
}

/** A pool: statements run on any connection; `transaction` checks one out for BEGIN … COMMIT. */
export function fromPg<Client extends PgClientLike = PoolClient>(pool: PgPoolLike<Client>): Sql<Client> {
  return {
    query: (text, params) => run(pool, text, params),
    async transaction<T>(fn: (tx: Transaction<Client>) => Promise<T>): Promise<T> {
      const client = await pool.connect();
      let broken: Error | undefined;
      try {
        await client.query('BEGIN');
        const value = await fn(fromPgClient(client));
        await client.query('COMMIT');
        return value;
      } catch (error) {
        try {
          await client.query('ROLLBACK');
        } catch (rollbackError) {
          // The connection is unusable; destroy it rather than return it to the pool.
          broken = rollbackError as Error;
        }
        throw error;
      } finally {
        client.release(broken ?? false);
      }
    },
  };
}
