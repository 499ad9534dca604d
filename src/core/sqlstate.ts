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
 * Five digits or upper-case letters, as PostgreSQL's error codes are, in one of its classes: they
 * start with a digit, or are F0, HV, P0 or XX. Node's `EPIPE` is five capitals too, and is not one.
 */
function isSqlState(code: unknown): code is string {
  return typeof code === 'string' && /^(?:[0-9][0-9A-Z]|F0|HV|P0|XX)[0-9A-Z]{3}$/.test(code);
}

/**
 * Prisma's error codes, P1000–P6999. PostgreSQL's only class starting with P is P0 (PL/pgSQL:
 * `P0001` is RAISE EXCEPTION), so these never collide with a real SQLSTATE.
 */
const prismaCode = /^P[1-9][0-9]{3}$/;

/**
 * Reads the SQLSTATE of a driver error, whatever the driver names the field. ORMs wrap driver
 * errors, so the chain is followed a few levels: `cause` (Drizzle's DrizzleQueryError, a Prisma
 * `DriverAdapterError`) and Prisma's `meta.driverAdapterError`.
 *
 * Prisma's own codes (`P2010` for a failed raw query, `P2034` for a write conflict) look like
 * SQLSTATEs but are not: the real one is in `meta.driverAdapterError.cause.originalCode`, and a
 * failed COMMIT has only that `originalCode`. Taking `P2010` would hide `40001`, `40P01` and
 * `23505` from idem, so retries and in-progress answers would silently stop working.
 */
export function sqlStateOf(error: unknown): string | undefined {
  for (let depth = 0; depth < 6 && typeof error === 'object' && error !== null; depth++) {
    const e = error as {
      code?: unknown;
      sqlState?: unknown;
      originalCode?: unknown;
      meta?: { driverAdapterError?: unknown } | null;
      cause?: unknown;
    };
    if (typeof e.sqlState === 'string') return e.sqlState;
    if (isSqlState(e.originalCode)) return e.originalCode;
    if (isSqlState(e.code) && !prismaCode.test(e.code)) return e.code;
    error = e.meta?.driverAdapterError ?? e.cause;
  }
  return undefined;
}

/**
 * 40001 and 40P01: the whole transaction may be retried as it is.
 *
 * @example
 * for (let attempt = 0; ; attempt++) {
 *   try {
 *     return await sql.transaction(work);
 *   } catch (error) {
 *     if (attempt < 3 && isTransactionRetryable(error)) continue;
 *     throw error;
 *   }
 * }
 */
export function isTransactionRetryable(error: unknown): boolean {
  const state = sqlStateOf(error);
  return state === SqlState.serializationFailure || state === SqlState.deadlockDetected;
}
