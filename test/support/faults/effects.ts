/** A business table with no unique constraint, so a second effect of one intent would show. */
import type pg from 'pg';

export async function createEffects(pool: pg.Pool, schema: string): Promise<void> {
  await pool.query(`CREATE TABLE "${schema}".effects (key text NOT NULL, amount int NOT NULL)`);
}

/** Effects per key, for the keys given (0 for a key with none). */
export async function effectsOf(
  pool: pg.Pool,
  schema: string,
  keys: readonly string[],
): Promise<Map<string, number>> {
  const { rows } = await pool.query<{ key: string; n: number }>(
    `SELECT key, count(*)::int AS n FROM "${schema}".effects WHERE key = ANY($1) GROUP BY key`,
    [keys],
  );
  const counts = new Map(keys.map((k) => [k, 0]));
  for (const r of rows) counts.set(r.key, r.n);
  return counts;
}
