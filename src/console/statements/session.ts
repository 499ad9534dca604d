/**
 * The statements that open each console read: the transaction is READ ONLY, so the console's reads
 * cannot write by mistake, and its `statement_timeout` ends a long scan on a busy database.
 * Neither names the schema.
 */
import { defineStatement, nothing } from '../../core/statement.js';

/** Makes the current transaction read-only (its first statement). */
export const readOnly = defineStatement({
  text: 'SET TRANSACTION READ ONLY',
  params: (_: void) => [],
  result: nothing,
});

/** Sets `statement_timeout` to `ms` for the current transaction only (`is_local`). */
export const statementTimeout = defineStatement({
  text: `SELECT set_config('statement_timeout', $1, true)`,
  params: ({ ms }: { ms: number }) => [String(ms)],
  result: nothing,
});
