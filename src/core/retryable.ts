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
 * Whether an error is transient: the same intent may succeed if tried again with the same key.
 * An error can say so itself with a boolean `retryable` property; otherwise PostgreSQL
 * serialization, deadlock, lock-timeout, cancel, shutdown and class-08 connection errors, a
 * driver's lost connection, and Node network errors, are retryable. Everything else is not.
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
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && (retryableNetworkCodes.has(code) || connectionLostCodes.has(code)))
    return true;
  if (error instanceof Error && code === undefined && connectionLostMessages.has(error.message)) return true;
  const cause = (error as { cause?: unknown }).cause;
  return cause !== undefined && cause !== error ? isRetryable(cause) : false;
}
