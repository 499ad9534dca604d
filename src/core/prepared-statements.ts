/**
 * Recognising the failure a transaction-mode pooler causes to named prepared statements. Such a
 * pooler hands each transaction any server connection, so a statement prepared on one connection
 * is missing on the next (26000) or was already prepared there by another client (42P05).
 */
import { preparedName } from './statement.js';
import { SqlState, sqlStateOf } from './sqlstate.js';

/**
 * PgBouncer 1.21+ tracks prepared statements itself and answers some mismatches with its own
 * message; match those by text as well, whatever SQLSTATE it sends.
 */
const mismatchMessage = /prepared statement\b.*\b(does not exist|did not exist|already exists|not found)/i;

/** Whether `error` says a named prepared statement is missing on, or already on, the server connection. */
export function isPreparedStatementMismatch(error: unknown): boolean {
  const state = sqlStateOf(error);
  if (state === SqlState.duplicatePreparedStatement || state === SqlState.invalidSqlStatementName)
    return true;
  return error instanceof Error && mismatchMessage.test(error.message);
}

/**
 * A prepared-statement name per statement text: `idem_<prefix>_<key>_<hash of the text>`, so two
 * schemas (or two versions of a statement) on one connection never collide, and node-postgres
 * parses and plans each once per connection. `keys` limits the names to the hot statements.
 */
export function prepareNames<K extends string>(
  prefix: string,
  texts: Record<K, string>,
  keys: readonly K[] = Object.keys(texts) as K[],
): Record<K, { name: string }> {
  return Object.fromEntries(
    keys.map((key) => [key, { name: preparedName(prefix, key, texts[key]) }]),
  ) as Record<K, { name: string }>;
}
