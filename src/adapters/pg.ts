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
import type { QueryOptions, QueryResult, Row, Sql, Transaction } from '../core/sql.js';

/** The subset of `pg.Pool` idem uses (types only: the core never loads `pg`). */
export interface PgPoolLike<C extends PgClientLike = PoolClient> extends PgClientLike {
  connect(): Promise<C & { release(error?: Error | boolean): void }>;
}

/** The subset of `pg.Client` / `pg.PoolClient` idem uses. */
export interface PgClientLike {
  query(text: string, params?: unknown[]): Promise<{ rows: unknown[]; rowCount: number | null }>;
  query(config: {
    name: string;
    text: string;
    values?: unknown[];
  }): Promise<{ rows: unknown[]; rowCount: number | null }>;
}

/** Options of the node-postgres adapter. */
export interface PgAdapterOptions {
  /**
   * Use named prepared statements for idem's own statements (parsed and planned once per
   * connection). Default true. Turn it off behind a pooler that cannot keep prepared statements
   * across transactions (PgBouncer in transaction mode before 1.21).
   */
  prepare?: boolean;
}

async function run<R extends Row>(
  db: PgClientLike,
  text: string,
  params: readonly unknown[] | undefined,
  options: QueryOptions | undefined,
  prepare: boolean,
): Promise<QueryResult<R>> {
  const raw =
    prepare && options?.name
      ? await db.query({ name: options.name, text, values: params as unknown[] | undefined })
      : await db.query(text, params as unknown[] | undefined);
  // Several statements without parameters (a migration file) come back as an array of results.
  const result = Array.isArray(raw) ? (raw.at(-1) as typeof raw) : raw;
  return { rows: result.rows as R[], rowCount: result.rowCount ?? result.rows.length };
}

/** A transaction on a client the caller already began. Idem will not BEGIN or COMMIT it. */
export function fromPgClient<C extends PgClientLike>(
  client: C,
  options: PgAdapterOptions = {},
): Transaction<C> {
  const prepare = options.prepare ?? true;
  return { client, query: (text, params, queryOptions) => run(client, text, params, queryOptions, prepare) };
}

/** A pool: statements run on any connection; `transaction` checks one out for BEGIN … COMMIT. */
export function fromPg<Client extends PgClientLike = PoolClient>(
  pool: PgPoolLike<Client>,
  options: PgAdapterOptions = {},
): Sql<Client> {
  const prepare = options.prepare ?? true;
  return {
    // A pool hands out any connection; prepared statements are per connection, so pg prepares on
    // first use on each one.
    query: (text, params, queryOptions) => run(pool, text, params, queryOptions, prepare),
    async transaction<T>(fn: (tx: Transaction<Client>) => Promise<T>): Promise<T> {
      const client = await pool.connect();
      let broken: Error | undefined;
      // node-postgres emits 'error' on a checked-out client whose connection is lost (a server
      // restart, a cut connection). With no listener that is an uncaught exception that ends the
      // process; the pending query rejects with the same error anyway, so only remember it.
      const events = client as {
        on?(e: 'error', f: (error: Error) => void): void;
        off?(e: 'error', f: (error: Error) => void): void;
      };
      const onError = (error: Error) => {
        broken = error;
      };
      events.on?.('error', onError);
      try {
        await client.query('BEGIN');
        const value = await fn(fromPgClient(client, options));
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
        events.off?.('error', onError);
        client.release(broken ?? false);
      }
    },
  };
}
