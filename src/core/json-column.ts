/**
 * A json or jsonb column's value. idem's statements read these columns as text (`::text`), so
 * every driver answers alike and the parse is ours; a value a driver parsed already passes
 * through, and NULL is null.
 */
export function parseJsonColumn(value: unknown): unknown {
  return typeof value === 'string' ? (JSON.parse(value) as unknown) : (value ?? null);
}
