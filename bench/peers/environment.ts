/**
 * What every peer variant shares: one PostgreSQL schema with idem's tables and the business table,
 * one pool, one Redis connection, and a namespace that keeps this run's Redis keys apart.
 */
import { randomBytes } from 'node:crypto';
import { createClient } from '@redis/client';
import pg from 'pg';
import { fromPg } from '../../src/adapters/pg.js';
import type { Sql } from '../../src/core/sql.js';
import { migrate } from '../../src/migrate/migrate.js';
import type { Recording } from '../../src/operations/options.js';

export const defaultRedisUrl = 'redis://127.0.0.1:6379';

// Fail fast when Redis is not there (node-redis otherwise reconnects forever and `connect` hangs).
const newRedisClient = (url: string) =>
  createClient({
    url,
    socket: {
      reconnectStrategy: (retries: number) =>
        retries >= 3 ? new Error(`Redis at ${url} is unreachable`) : 200,
    },
  });
export type RedisClient = ReturnType<typeof newRedisClient>;

export interface PeerEnvironment {
  databaseUrl: string;
  redisUrl: string;
  schema: string;
  /** Prefix of every Redis key this run writes; removed by `close`. */
  namespace: string;
  pool: pg.Pool;
  sql: Sql<pg.PoolClient>;
  /** How idem's variants record their keys; undefined: idem's default. */
  recording: Recording | undefined;
  redis: RedisClient;
  /** Business rows written for `key`: the effects actually produced. */
  countRows(key: string): Promise<number>;
  /** Drops the schema (when this environment created it) and this run's Redis keys. */
  close(): Promise<void>;
}

export interface EnvironmentOptions {
  databaseUrl: string;
  redisUrl?: string;
  /** Pool size. Default 32. */
  poolSize?: number;
  /** Attach to an existing schema and namespace (the crash drill's child process) instead of creating them. */
  attach?: { schema: string; namespace: string };
  /** How idem's variants record their keys. Default: idem's default (`'commit'`). */
  recording?: Recording;
}

export async function createPeerEnvironment(options: EnvironmentOptions): Promise<PeerEnvironment> {
  const redisUrl = options.redisUrl ?? defaultRedisUrl;
  const id = randomBytes(3).toString('hex');
  const schema = options.attach?.schema ?? `idem_bench_peers_${id}`;
  const namespace = options.attach?.namespace ?? `idem-bench-peers-${id}`;
  // Redis first: when it is missing, nothing has been created yet that would need cleaning up.
  const redis = newRedisClient(redisUrl);
  redis.on('error', (error: Error) => console.error(`[bench/peers] redis: ${error.message}`));
  await redis.connect();
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: options.poolSize ?? 32 });
  const sql = fromPg(pool);
  if (!options.attach) {
    await migrate(sql, { schema });
    // The business table has no unique constraint on the request key, like most business tables
    // (an orders table does not hold the client's idempotency key): a constraint there would be a
    // second dedupe mechanism and would hide what the idempotency layer itself does.
    await pool.query(`CREATE TABLE "${schema}".orders (
      id bigserial PRIMARY KEY,
      request_key text NOT NULL,
      amount integer NOT NULL,
      currency text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    )`);
  }
  return {
    databaseUrl: options.databaseUrl,
    redisUrl,
    schema,
    namespace,
    pool,
    sql,
    recording: options.recording,
    redis,
    async countRows(key) {
      const { rows } = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".orders WHERE request_key = $1`,
        [key],
      );
      return rows[0]!.n;
    },
    async close() {
      if (!options.attach) {
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await deleteKeys(redis, `*${namespace}*`);
      }
      await pool.end();
      redis.destroy();
    },
  };
}

/** Deletes the keys matching `pattern`, in SCAN pages (never KEYS on a shared server). */
async function deleteKeys(redis: RedisClient, pattern: string): Promise<void> {
  for await (const keys of redis.scanIterator({ MATCH: pattern, COUNT: 1000 })) {
    if (keys.length) await redis.del(keys);
  }
}
