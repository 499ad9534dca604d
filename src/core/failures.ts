/**
 * One classification of failures, used by every module (docs/principles.md, 12): what a retry of
 * the same intent, with the same key, can expect.
 *
 * - `transient`: nothing of the failed attempt committed, or what did is recorded; a retry may
 *   succeed. A transient failure is never stored as the intent's outcome.
 * - `permanent`: the same attempt fails the same way every time (a constraint, bad data, a
 *   programming error). Storing it is right.
 * - `unknown-outcome`: the attempt may have committed (the connection died while COMMIT was in
 *   flight, `40003`, `08007`). Never guessed: resolved by reading the key, or by retrying with the
 *   same key, which the key's unique constraint makes safe.
 *
 * The rules are data (`databaseFailureRules`, `driverFailureRules`) so that docs/operations/reliability.md's
 * table and the property test read the same list the code applies.
 */
import { isIdemError } from './errors.js';
import { SqlState, sqlStateOf } from './sqlstate.js';

export type FailureKind = 'transient' | 'permanent' | 'unknown-outcome';

/** What `classifyFailure` says of an error. */
export interface FailureClass {
  kind: FailureKind;
  /** A short reason for logs and metrics: `sqlstate 53300 too many connections`, `ECONNRESET`. */
  reason: string;
  /**
   * The connection that met the error must not be used again: it was lost, timed out mid-statement,
   * the server ended the session, or it reached a read-only node (a standby, a demoted primary)
   * where every later write would fail too. Send nothing more on it (no ROLLBACK); destroy it, so
   * the pool's next connection can reach the primary.
   */
  discardConnection: boolean;
  /**
   * A timeout (connect, pool checkout, query read, statement or lock timeout): an attempt made at
   * once would most likely wait as long again, so retries belong to the caller, with backoff.
   */
  timedOut: boolean;
}

/** One rule of the classification: an exact SQLSTATE, or a class (its first two characters). */
export interface FailureRule {
  /** A SQLSTATE (`53300`) or a SQLSTATE class (`08`). Exact codes win over their class. */
  match: string;
  kind: FailureKind;
  /** What it means, as docs/operations/reliability.md prints it. */
  meaning: string;
  /** See `FailureClass.discardConnection`. */
  discardConnection?: boolean;
  /** See `FailureClass.timedOut`. */
  timedOut?: boolean;
}

/**
 * PostgreSQL's SQLSTATEs (https://www.postgresql.org/docs/current/errcodes-appendix.html). A
 * SQLSTATE that no rule names is `permanent`: a constraint (23…), bad data (22…), a syntax or
 * undefined object error (42…), a RAISE (P0…).
 */
export const databaseFailureRules: readonly FailureRule[] = [
  {
    match: '08',
    kind: 'transient',
    meaning: 'connection exception: the connection failed or was lost',
    discardConnection: true,
  },
  {
    match: '08007',
    kind: 'unknown-outcome',
    meaning: 'transaction resolution unknown',
    discardConnection: true,
  },
  {
    match: '25006',
    kind: 'transient',
    meaning: 'read-only transaction: a standby, or a primary being demoted',
    discardConnection: true,
  },
  {
    match: '25P03',
    kind: 'transient',
    meaning: 'idle_in_transaction_session_timeout ended the session (rolled back)',
    discardConnection: true,
    timedOut: true,
  },
  { match: '40000', kind: 'transient', meaning: 'transaction rolled back' },
  { match: '40001', kind: 'transient', meaning: 'serialization failure (rolled back)' },
  { match: '40P01', kind: 'transient', meaning: 'deadlock detected (rolled back)' },
  { match: '40002', kind: 'permanent', meaning: 'integrity constraint violation at COMMIT (rolled back)' },
  { match: '40003', kind: 'unknown-outcome', meaning: 'statement completion unknown' },
  {
    match: '53',
    kind: 'transient',
    meaning: 'insufficient resources: too many connections (53300), out of memory, disk full',
  },
  { match: '55P03', kind: 'transient', meaning: 'lock not available (lock_timeout)', timedOut: true },
  { match: '57000', kind: 'transient', meaning: 'operator intervention' },
  {
    match: '57014',
    kind: 'transient',
    meaning: 'query canceled (statement_timeout, or a cancel request)',
    timedOut: true,
  },
  {
    match: '57P01',
    kind: 'transient',
    meaning: 'admin shutdown: the server is stopping, or the backend was terminated',
    discardConnection: true,
  },
  {
    match: '57P02',
    kind: 'transient',
    meaning: 'crash shutdown: another backend crashed',
    discardConnection: true,
  },
  {
    match: '57P03',
    kind: 'transient',
    meaning: 'cannot connect now: the server is starting, stopping or in recovery',
    discardConnection: true,
  },
  { match: '57P04', kind: 'permanent', meaning: 'database dropped', discardConnection: true },
  {
    match: '57P05',
    kind: 'transient',
    meaning: 'idle_session_timeout ended the session',
    discardConnection: true,
  },
  { match: '58000', kind: 'transient', meaning: 'system error outside PostgreSQL' },
  { match: '58030', kind: 'transient', meaning: 'I/O error' },
  { match: '72000', kind: 'transient', meaning: 'snapshot too old' },
  {
    match: SqlState.duplicatePreparedStatement,
    kind: 'transient',
    meaning: 'prepared statement already exists: a transaction-mode pooler swapped the connection',
  },
  {
    match: SqlState.invalidSqlStatementName,
    kind: 'transient',
    meaning: 'prepared statement does not exist: a transaction-mode pooler swapped the connection',
  },
];

/** A failure a driver reports without a SQLSTATE: by its `code`, its `name` or its exact message. */
export interface DriverFailureRule {
  driver: string;
  /** Matched against the error's `code`. */
  code?: string;
  /** Matched against the error's `name`. */
  name?: string;
  /** Matched against the whole message, or its start when it ends with `…`. */
  message?: string;
  kind: FailureKind;
  meaning: string;
  discardConnection?: boolean;
  timedOut?: boolean;
}

const lost = { kind: 'transient', discardConnection: true } as const;

/** What the drivers and ORMs idem adapts report for a failed or lost connection. */
export const driverFailureRules: readonly DriverFailureRule[] = [
  ...[
    'ECONNRESET',
    'ECONNREFUSED',
    'ECONNABORTED',
    'EPIPE',
    'ETIMEDOUT',
    'EAI_AGAIN',
    'EHOSTUNREACH',
    'EHOSTDOWN',
    'ENETUNREACH',
    'ENETDOWN',
    'ENETRESET',
  ].map((code) => ({
    driver: 'node',
    code,
    ...lost,
    meaning: 'network error',
    timedOut: code === 'ETIMEDOUT',
  })),
  ...['UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'].map(
    (code) => ({
      driver: 'undici',
      code,
      ...lost,
      meaning: 'network error or timeout',
      timedOut: code !== 'UND_ERR_SOCKET',
    }),
  ),
  {
    driver: 'pg',
    message: 'Connection terminated unexpectedly',
    ...lost,
    meaning: 'the server closed the connection (restart, failover, cut)',
  },
  { driver: 'pg', message: 'Connection terminated', ...lost, meaning: 'the client ended while a query ran' },
  {
    driver: 'pg',
    message: 'Connection terminated due to connection timeout',
    ...lost,
    timedOut: true,
    meaning: 'connectionTimeoutMillis passed before the server answered',
  },
  {
    driver: 'pg',
    message: 'timeout expired',
    ...lost,
    timedOut: true,
    meaning: 'connect timeout (pg.Client)',
  },
  {
    driver: 'pg-pool',
    message: 'timeout exceeded when trying to connect',
    ...lost,
    timedOut: true,
    meaning: 'no pooled connection within connectionTimeoutMillis (the pool was full or the server slow)',
  },
  {
    driver: 'pg',
    message: 'Query read timeout',
    ...lost,
    timedOut: true,
    meaning: 'query_timeout passed without an answer (the link may be partitioned)',
  },
  {
    driver: 'pg',
    message: 'Client has encountered a connection error and is not queryable',
    ...lost,
    meaning: 'a query on a client whose connection was lost',
  },
  {
    driver: 'pg',
    message: 'Client was closed and is not queryable',
    ...lost,
    meaning: 'a query on a client being closed',
  },
  {
    driver: 'pg',
    message: 'Received unexpected …',
    ...lost,
    meaning: 'the protocol stream is out of step (a broken connection)',
  },
  {
    driver: 'pg-pool',
    message: 'Cannot use a pool after calling end on the pool',
    kind: 'transient',
    meaning: 'the application is shutting down; nothing ran',
  },
  ...['CONNECTION_CLOSED', 'CONNECTION_DESTROYED', 'CONNECT_TIMEOUT'].map((code) => ({
    driver: 'postgres.js',
    code,
    ...lost,
    meaning: 'connection lost, or connect_timeout passed',
    timedOut: code === 'CONNECT_TIMEOUT',
  })),
  {
    driver: 'postgres.js',
    code: 'CONNECTION_ENDED',
    kind: 'transient',
    meaning: 'sql.end() was called: the application is shutting down; nothing ran',
  },
  {
    driver: 'knex',
    name: 'KnexTimeoutError',
    kind: 'transient',
    timedOut: true,
    meaning: 'no pooled connection within acquireConnectionTimeout',
  },
  ...(
    [
      ['P1001', 'database unreachable'],
      ['P1002', 'database timed out'],
      ['P1008', 'operation timed out'],
      ['P1017', 'server closed the connection'],
      ['P2024', 'no pooled connection in time'],
      ['P2028', 'transaction could not start or expired (rolled back)'],
      ['P2034', 'write conflict or deadlock (rolled back)'],
      ['P2037', 'too many database connections'],
    ] as const
  ).map(([code, meaning]) => ({
    driver: 'prisma',
    code,
    kind: 'transient' as const,
    meaning,
    timedOut: code === 'P1002' || code === 'P1008' || code === 'P2024',
  })),
];

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
  'TransactionWriteConflict',
]);

const exactRules = new Map(databaseFailureRules.filter((r) => r.match.length === 5).map((r) => [r.match, r]));
const classRules = new Map(databaseFailureRules.filter((r) => r.match.length === 2).map((r) => [r.match, r]));
const byCode = new Map(driverFailureRules.filter((r) => r.code).map((r) => [r.code!, r]));
const byName = new Map(driverFailureRules.filter((r) => r.name).map((r) => [r.name!, r]));
const byMessage = new Map(
  driverFailureRules.filter((r) => r.message && !r.message.endsWith('…')).map((r) => [r.message!, r]),
);
const byMessageStart = driverFailureRules
  .filter((r) => r.message?.endsWith('…'))
  .map((r) => ({ start: r.message!.slice(0, -1), rule: r }));

const permanent = (reason: string): FailureClass => ({
  kind: 'permanent',
  reason,
  discardConnection: false,
  timedOut: false,
});

/** The rule a SQLSTATE falls under, or undefined (permanent). */
export function databaseFailureRule(state: string): FailureRule | undefined {
  return exactRules.get(state) ?? classRules.get(state.slice(0, 2));
}

/**
 * Classifies a failure, from the error alone. An error can say what it is itself: an idem error's
 * `retryable`, or a boolean `retryable` property (`false` is permanent; `true` is transient). Then
 * the SQLSTATE (through ORM wrappers), then the drivers' own forms, then the `cause` chain.
 * Anything unknown is `permanent`: an application's own error is not retried by default.
 *
 * @example
 * const { kind, reason } = classifyFailure(error);
 * if (kind !== 'permanent') return reply.code(503).header('Retry-After', '1').send({ reason });
 */
export function classifyFailure(error: unknown): FailureClass {
  for (let depth = 0, current = error; depth < 8; depth++) {
    if (typeof current !== 'object' || current === null) return permanent(String(current));
    const found = classifyOne(current);
    if (found) return found;
    const cause = (current as { cause?: unknown }).cause;
    if (cause === undefined || cause === current) break;
    current = cause;
  }
  return permanent(describe(error));
}

/**
 * Whether the failure says the database is unreachable or refusing work (a lost or refused
 * connection, a timeout, too many clients, a read-only node, a shutdown) rather than anything about
 * the work itself. Consumers redeliver such messages without counting the attempt, so an outage
 * of any length never dead-letters a message that was never really tried.
 */
export function isDatabaseOutage(error: unknown): boolean {
  const failure = classifyFailure(error);
  if (failure.kind === 'permanent') return false;
  if (failure.discardConnection || failure.timedOut) return true;
  const state = sqlStateOf(error);
  return state !== undefined && (state.startsWith('53') || state.startsWith('57'));
}

function classifyOne(error: object): FailureClass | undefined {
  if (isIdemError(error)) {
    if (error.code === 'IDEM_COMMIT_UNKNOWN') {
      return {
        kind: 'unknown-outcome',
        reason: 'COMMIT outcome unknown',
        discardConnection: true,
        timedOut: false,
      };
    }
    // An idem error that wraps a driver's error says whether the connection went with it.
    const inner =
      error.cause !== undefined && error.cause !== error ? classifyFailure(error.cause) : undefined;
    return {
      kind: error.retryable ? 'transient' : 'permanent',
      reason: error.code,
      discardConnection: inner?.discardConnection ?? false,
      timedOut: inner?.timedOut ?? false,
    };
  }
  const flagged = (error as { retryable?: unknown }).retryable;
  const state = sqlStateOf(error);
  if (state !== undefined) {
    const rule = databaseFailureRule(state);
    if (typeof flagged === 'boolean' && !(rule && rule.kind === 'unknown-outcome')) {
      return { ...fromRule(rule, `sqlstate ${state}`), kind: flagged ? 'transient' : 'permanent' };
    }
    if (!rule) return permanent(`sqlstate ${state}`);
    return fromRule(rule, `sqlstate ${state} ${rule.meaning}`);
  }
  if (typeof flagged === 'boolean') {
    return { ...permanent(describe(error)), kind: flagged ? 'transient' : 'permanent' };
  }
  const kind = prismaAdapterKind(error);
  if (kind !== undefined && prismaTransientKinds.has(kind)) {
    return {
      kind: 'transient',
      reason: `prisma ${kind}`,
      discardConnection: true,
      timedOut: kind === 'SocketTimeout',
    };
  }
  const code = (error as { code?: unknown }).code;
  const name = (error as { name?: unknown }).name;
  const message = (error as { message?: unknown }).message;
  const rule =
    (typeof code === 'string' ? byCode.get(code) : undefined) ??
    (typeof name === 'string' ? byName.get(name) : undefined) ??
    (typeof message === 'string' && code === undefined ? messageRule(message) : undefined);
  if (!rule) return undefined;
  return fromRule(rule, `${rule.driver} ${rule.code ?? rule.name ?? rule.message}`);
}

function fromRule(rule: FailureRule | DriverFailureRule | undefined, reason: string): FailureClass {
  return {
    kind: rule?.kind ?? 'permanent',
    reason,
    discardConnection: rule?.discardConnection ?? false,
    timedOut: rule?.timedOut ?? false,
  };
}

function messageRule(message: string): DriverFailureRule | undefined {
  return byMessage.get(message) ?? byMessageStart.find((m) => message.startsWith(m.start))?.rule;
}

function prismaAdapterKind(error: object): string | undefined {
  const meta = (error as { meta?: { driverAdapterError?: { cause?: { kind?: unknown } } } }).meta;
  const kind = meta?.driverAdapterError?.cause?.kind;
  return typeof kind === 'string' ? kind : undefined;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message.slice(0, 200) : String(error).slice(0, 200);
}
