/**
 * Recognising the failure a transaction-mode pooler causes to named prepared statements. Such a
 * pooler hands each transaction any server connection, so a statement prepared on one connection
 * is missing on the next (26000) or was already prepared there by another client (42P05).
 */
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
