/** PostgreSQL error codes that idem acts on. https://www.postgresql.org/docs/current/errcodes-appendix.html */
export const SqlState = {
  serializationFailure: '40001',
  deadlockDetected: '40P01',
  lockNotAvailable: '55P03',
  uniqueViolation: '23505',
  queryCanceled: '57014',
  adminShutdown: '57P01',
  crashShutdown: '57P02',
  cannotConnectNow: '57P03',
  /** A named prepared statement already exists on this server connection (a pooler swapped it). */
  duplicatePreparedStatement: '42P05',
  /** The named prepared statement does not exist on this server connection (a pooler swapped it). */
  invalidSqlStatementName: '26000',
  /** Class 08: connection exceptions. */
  connectionExceptionClass: '08',
} as const;

/**
 * Reads the SQLSTATE of a driver error, whatever the driver names the field. ORMs wrap driver
 * errors (Drizzle's DrizzleQueryError, for one), so the `cause` chain is followed a few levels.
 */
export function sqlStateOf(error: unknown): string | undefined {
  for (let depth = 0; depth < 5 && typeof error === 'object' && error !== null; depth++) {
    const e = error as { code?: unknown; sqlState?: unknown; cause?: unknown };
    if (typeof e.sqlState === 'string') return e.sqlState;
    if (typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code)) return e.code;
    error = e.cause;
  }
  return undefined;
}

/** 40001 and 40P01: the whole transaction may be retried as it is. */
export function isTransactionRetryable(error: unknown): boolean {
  const state = sqlStateOf(error);
  return state === SqlState.serializationFailure || state === SqlState.deadlockDetected;
}
