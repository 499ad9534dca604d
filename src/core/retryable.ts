import { isIdemError } from './errors.js';
import { SqlState, sqlStateOf } from './sqlstate.js';

/** Node's network error codes that mean "the other side may not have seen this; try again". */
export const retryableNetworkCodes: ReadonlySet<string> = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
]);

/**
 * Connection losses that drivers report without a code: node-postgres ends every pending query with
 * "Connection terminated unexpectedly" when the server closes the connection (a restart, a failover,
 * a cut at COMMIT), and refuses later queries on that client with the second message; postgres.js
 * says `CONNECTION_CLOSED`. The outcome of the interrupted statement is unknown, so the caller must
 * retry with the same key.
 */
const connectionLostMessages: ReadonlySet<string> = new Set([
  'Connection terminated unexpectedly',
  'Client has encountered a connection error and is not queryable',
]);
const connectionLostCodes: ReadonlySet<string> = new Set(['CONNECTION_CLOSED']);

/**
 * Prisma's transient errors, which carry no SQLSTATE: the database unreachable or timing out
 * (P1001, P1002, P1008), the connection closed (P1017), no pool connection in time (P2024), an
 * interactive transaction that could not start or expired (P2028: rolled back, nothing committed)
 * and a write conflict or deadlock (P2034).
 */
const prismaTransientCodes: ReadonlySet<string> = new Set([
  'P1001',
  'P1002',
  'P1008',
  'P1017',
  'P2024',
  'P2028',
  'P2034',
]);

const retryableSqlStates: ReadonlySet<string> = new Set([
  SqlState.serializationFailure,
  SqlState.deadlockDetected,
  SqlState.lockNotAvailable,
  SqlState.queryCanceled,
  SqlState.adminShutdown,
  SqlState.crashShutdown,
  SqlState.cannotConnectNow,
]);

/**
 * What Prisma's driver adapters report, without a SQLSTATE, for a connection that failed or was
 * lost (`meta.driverAdapterError.cause.kind`), e.g. inside a P2010 raw-query error.
 */
const prismaTransientKinds: ReadonlySet<string> = new Set([
  'DatabaseNotReachable',
  'ConnectionClosed',
  'SocketTimeout',
  'TooManyConnections',
  'TransactionAlreadyClosed',
]);

function prismaAdapterKind(error: object): string | undefined {
  const meta = (error as { meta?: { driverAdapterError?: { cause?: { kind?: unknown } } } }).meta;
  const kind = meta?.driverAdapterError?.cause?.kind;
  return typeof kind === 'string' ? kind : undefined;
}

/**
 * Whether an error is transient: the same intent may succeed if tried again with the same key.
 * An error can say so itself with a boolean `retryable` property; otherwise PostgreSQL
 * serialization, deadlock, lock-timeout, cancel, shutdown and class-08 connection errors, a
 * driver's lost connection, Prisma's transient errors, and Node network errors, are retryable. Everything else is not.
 *
 * @example
 * if (isRetryable(error)) return reply.code(503).header('Retry-After', '1').send();
 */
export function isRetryable(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  if (isIdemError(error)) return error.retryable;
  const flagged = (error as { retryable?: unknown }).retryable;
  if (typeof flagged === 'boolean') return flagged;
  const state = sqlStateOf(error);
  if (state !== undefined) {
    return retryableSqlStates.has(state) || state.startsWith(SqlState.connectionExceptionClass);
  }
  const kind = prismaAdapterKind(error);
  if (kind !== undefined && prismaTransientKinds.has(kind)) return true;
  const code = (error as { code?: unknown }).code;
  if (
    typeof code === 'string' &&
    (retryableNetworkCodes.has(code) || connectionLostCodes.has(code) || prismaTransientCodes.has(code))
  )
    return true;
  if (error instanceof Error && code === undefined && connectionLostMessages.has(error.message)) return true;
  const cause = (error as { cause?: unknown }).cause;
  return cause !== undefined && cause !== error ? isRetryable(cause) : false;
}
