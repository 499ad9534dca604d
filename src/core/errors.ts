/**
 * Every error idem raises itself is an `IdemError` with a stable string `code`; `idem.run`, `runIn`
 * and `steps` also wrap whatever else fails (the database driver's errors, the handler's) in
 * `OperationFailedError`. The other modules' calls (outbox, inbox, claims, sagas, webhooks) let the
 * driver's own errors through unchanged, as a query of the application's would: `isRetryable`
 * classifies those. Guards check a brand property rather than `instanceof`, so they hold when two
 * copies of the package are installed.
 */
const brand = Symbol.for('idem.error');

/**
 * Every code an idem error or an idem problem document carries, in one list: the errors idem
 * throws, and the `code` of the problem documents its HTTP integration and webhook receiver
 * answer with (some are both). Stable: clients and operators branch on them.
 */
export const idemErrorCodes = [
  'IDEM_INVALID_KEY',
  'IDEM_INVALID_ARGUMENT',
  'IDEM_KEY_REUSED',
  'IDEM_IN_PROGRESS',
  'IDEM_EXPIRED',
  'IDEM_FENCED',
  'IDEM_OPERATION_FAILED',
  'IDEM_STEP_FAILED',
  'IDEM_COMMIT_UNKNOWN',
  'IDEM_CONCURRENT_CHANGE',
  'IDEM_MIGRATION_FAILED',
  'IDEM_PREPARED_STATEMENTS_UNSUPPORTED',
  'IDEM_SAGA_FAILED',
  'IDEM_SAGA_STUCK',
  'IDEM_CIRCUIT_OPEN',
  'IDEM_HTTP_STATUS',
  'IDEM_PUBLISH_FAILED',
  'IDEM_MESSAGE_INVALID',
  'IDEM_LISTEN_DEAF',
  'IDEM_BODY_TOO_LARGE',
  'IDEM_BODY_MALFORMED',
  'IDEM_WEBHOOK_UNAUTHORIZED',
  'IDEM_WEBHOOK_MALFORMED',
  'IDEM_WEBHOOK_TOO_LARGE',
  'IDEM_WEBHOOK_RAW_BODY',
  'IDEM_WEBHOOK_EVENT_INVALID',
  'IDEM_WEBHOOK_DESTINATION_REFUSED',
  'IDEM_WEBHOOK_UNAVAILABLE',
  'IDEM_EMBEDDED_IN_USE',
  'IDEM_CONSOLE_BUSY',
  // Problem documents of the HTTP contract (docs/guide/http.md).
  'IDEM_KEY_MISSING',
  'IDEM_KEY_MALFORMED',
  'IDEM_KEY_TOO_LONG',
  'IDEM_KEY_MULTIPLE',
  'IDEM_TENANT_MISSING',
  'IDEM_MEDIA_TYPE_UNSUPPORTED',
  'IDEM_COMMIT_FAILED',
  'IDEM_UNAVAILABLE',
  'IDEM_INTERNAL',
] as const;

/** One of `idemErrorCodes`. */
export type IdemErrorCode = (typeof idemErrorCodes)[number];

export class IdemError extends Error {
  readonly [brand] = true;
  readonly code: IdemErrorCode;
  /** Whether the same call may succeed if tried again later. */
  readonly retryable: boolean;

  constructor(code: IdemErrorCode, message: string, options: { cause?: unknown; retryable?: boolean } = {}) {
    super(message, { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
}

/**
 * True for any idem error, including one from another copy of the package.
 *
 * @example
 * app.setErrorHandler((error, request, reply) => {
 *   if (isIdemError(error)) return reply.code(error.retryable ? 503 : 400).send({ code: error.code });
 *   throw error;
 * });
 */
export function isIdemError(error: unknown): error is IdemError {
  return typeof error === 'object' && error !== null && (error as Record<symbol, unknown>)[brand] === true;
}

function hasCode<C extends IdemErrorCode>(error: unknown, code: C): boolean {
  return isIdemError(error) && error.code === code;
}

/** The idempotency key is missing, empty, too long, or has characters outside printable ASCII. */
export class InvalidKeyError extends IdemError {
  constructor(message: string) {
    super('IDEM_INVALID_KEY', message, { cause: undefined });
  }
}

/** An option or argument is not valid. */
export class InvalidArgumentError extends IdemError {
  constructor(message: string) {
    super('IDEM_INVALID_ARGUMENT', message, { cause: undefined });
  }
}

/** The key was first used with a different request. Nothing ran. */
export class KeyReusedError extends IdemError {
  constructor(
    readonly scope: OperationScope,
    readonly storedFingerprint: string,
    readonly requestFingerprint: string,
  ) {
    super('IDEM_KEY_REUSED', `idempotency key was already used with a different request`, {
      cause: undefined,
    });
  }
}

/** Another execution of the same key is still running. Try again after `retryAfterMs`. */
export class InProgressError extends IdemError {
  constructor(
    readonly scope: OperationScope,
    readonly retryAfterMs: number,
    cause?: unknown,
  ) {
    super('IDEM_IN_PROGRESS', `an execution with this idempotency key is still in progress`, {
      cause,
      retryable: true,
    });
  }
}

/**
 * The stored response has been discarded but the key's tombstone remains: the operation did run.
 * `resource` points at what it created, when the handler named it.
 */
export class ExpiredError extends IdemError {
  constructor(
    readonly scope: OperationScope,
    readonly resource: ResourcePointer | null,
    readonly completedAt: number | null,
  ) {
    super('IDEM_EXPIRED', `the stored result for this idempotency key has expired`, { cause: undefined });
  }
}

/** A write came from a holder whose lease was taken over by another execution. It was refused. */
export class FencedError extends IdemError {
  constructor(
    readonly scope: OperationScope,
    readonly fence: number,
  ) {
    super('IDEM_FENCED', `this execution lost its lease to another one; its write was refused`, {
      cause: undefined,
    });
  }
}

/** The handler threw. Nothing it wrote remains. `retryable` says whether trying again may help. */
export class OperationFailedError extends IdemError {
  constructor(cause: unknown, retryable: boolean) {
    super('IDEM_OPERATION_FAILED', `operation failed: ${describe(cause)}`, { cause, retryable });
  }
}

/**
 * A multi-step operation failed for good: a non-retryable error after it had committed a step or
 * started an external call, so neither running it afresh nor resuming it can be right. It is
 * stored as `failed` with the error and the step: every retry of the key gets this error back
 * (`replayed: true`) until the key's tombstone passes, and nothing runs again. Operators find it
 * with `idem inspect` or the console (its recorded steps say which external calls started). Fix
 * the cause, undo what needs undoing, and send the intent again under a new key.
 */
export class StepFailedError extends IdemError {
  constructor(
    readonly scope: OperationScope,
    /** The step it failed at; null when the body threw between steps. */
    readonly step: string | null,
    /** The error's text, as stored. */
    readonly failure: string,
    cause: unknown,
    /** True when this is the stored failure of an earlier execution. */
    readonly replayed: boolean,
  ) {
    super(
      'IDEM_STEP_FAILED',
      `operation failed for good${step ? ` at step ${step}` : ''} and will not run again with this key: ${failure}`,
      { cause, retryable: false },
    );
  }
}

export class MigrationError extends IdemError {
  constructor(message: string, cause?: unknown) {
    super('IDEM_MIGRATION_FAILED', message, { cause });
  }
}

/**
 * A named prepared statement of idem's failed the way a transaction-mode pooler makes it fail
 * (42P05 "already exists", 26000 "does not exist"): the pooler hands each transaction any server
 * connection, and a statement prepared on one is missing on the next. Nothing of the failed
 * statement's transaction was committed, so the same call may be retried (`retryable`). The fix is
 * the adapter's `prepare: false` (`IDEM_PREPARE=false` for the demo and the CLI), or a pooler that
 * keeps prepared statements (PgBouncer 1.21+ with `max_prepared_statements`).
 */
export class PreparedStatementsUnsupportedError extends IdemError {
  constructor(
    /** The statement's name. */
    readonly statement: string,
    cause: unknown,
  ) {
    super(
      'IDEM_PREPARED_STATEMENTS_UNSUPPORTED',
      `named prepared statement "${statement}" failed (${describe(cause)}): the connection does not keep ` +
        `prepared statements, as behind a transaction-mode pooler (PgBouncer before 1.21 or without ` +
        `max_prepared_statements). Set prepare: false on idem's adapter (fromPg(pool, { prepare: false }); ` +
        `IDEM_PREPARE=false for the idem CLI and demo), or connect directly. Nothing was committed; retry.`,
      { cause, retryable: true },
    );
  }
}

/**
 * The connection died while COMMIT was in flight: the transaction may or may not have committed,
 * and nothing on this side can tell. Never guess: a retry with the same key reads the key and
 * answers from it when the transaction did commit, or runs afresh when it did not (the key's
 * unique constraint keeps the two from both taking effect). `retryable` is true; `cause` is the
 * driver's error. `idem.run` resolves it itself by retrying; the other modules' callers retry.
 */
export class CommitOutcomeUnknownError extends IdemError {
  constructor(cause: unknown) {
    super(
      'IDEM_COMMIT_UNKNOWN',
      `the connection was lost while COMMIT was in flight; the transaction may have committed (${describe(cause)}): retry with the same key`,
      { cause, retryable: true },
    );
  }
}

/**
 * A row idem had just written or read changed under it between two statements (another process
 * swept or finished it in between), more times than a bounded retry allows. Nothing was left half
 * done; the same call may be tried again.
 */
export class ConcurrentChangeError extends IdemError {
  constructor(message: string) {
    super('IDEM_CONCURRENT_CHANGE', message, { cause: undefined, retryable: true });
  }
}

/**
 * True for an `InvalidKeyError`, from any copy of the package (a brand check, not `instanceof`).
 *
 * @example
 * try {
 *   await idem.run({ tenant, operation: 'create-order', key: req.header('idempotency-key') ?? '' }, handler);
 * } catch (error) {
 *   if (isInvalidKey(error)) return res.status(400).send(error.message);
 *   throw error;
 * }
 */
export const isInvalidKey = (e: unknown): e is InvalidKeyError => hasCode(e, 'IDEM_INVALID_KEY');

/**
 * True for a `KeyReusedError`: the key was first used with another request; nothing ran.
 *
 * @example
 * if (isKeyReused(error)) return res.status(422).send('this key was used with another request');
 */
export const isKeyReused = (e: unknown): e is KeyReusedError => hasCode(e, 'IDEM_KEY_REUSED');

/**
 * True for an `InProgressError`: the same key is still running elsewhere; retry after `retryAfterMs`.
 *
 * @example
 * if (isInProgress(error)) {
 *   return res.status(409).set('Retry-After', String(Math.ceil(error.retryAfterMs / 1000))).end();
 * }
 */
export const isInProgress = (e: unknown): e is InProgressError => hasCode(e, 'IDEM_IN_PROGRESS');

/**
 * True for an `ExpiredError`: the operation ran, its stored result is gone, its tombstone remains.
 *
 * @example
 * if (isExpired(error)) return res.status(410).json({ resource: error.resource });
 */
export const isExpired = (e: unknown): e is ExpiredError => hasCode(e, 'IDEM_EXPIRED');

/**
 * True for a `FencedError`: this holder lost its lease; roll back and let go.
 *
 * @example
 * try {
 *   await claims.complete(task, result);
 * } catch (error) {
 *   if (!isFenced(error)) throw error; // the new holder's attempt is the one that counts
 * }
 */
export const isFenced = (e: unknown): e is FencedError => hasCode(e, 'IDEM_FENCED');

/**
 * True for an `OperationFailedError`: the handler threw and nothing it wrote remains.
 *
 * @example
 * if (isOperationFailed(error) && error.retryable) return res.status(503).end();
 */
export const isOperationFailed = (e: unknown): e is OperationFailedError =>
  hasCode(e, 'IDEM_OPERATION_FAILED');

/**
 * True for a `StepFailedError`: a multi-step operation failed for good; the key will not run again.
 *
 * @example
 * if (isStepFailed(error)) log.error({ step: error.step, failure: error.failure }, 'needs an operator');
 */
export const isStepFailed = (e: unknown): e is StepFailedError => hasCode(e, 'IDEM_STEP_FAILED');

/**
 * True for an `InvalidArgumentError`: an option or argument is not valid (a setup error).
 *
 * @example
 * expect(() => createClaims({ sql, leaseMs: -1 })).toThrow(expect.toSatisfy(isInvalidArgument));
 */
export const isInvalidArgument = (e: unknown): e is InvalidArgumentError =>
  hasCode(e, 'IDEM_INVALID_ARGUMENT');

/**
 * True for a `ConcurrentChangeError`: a row changed under idem between two statements; retryable.
 *
 * @example
 * if (isConcurrentChange(error)) return claims.enqueue(spec); // the same call again
 */
export const isConcurrentChange = (e: unknown): e is ConcurrentChangeError =>
  hasCode(e, 'IDEM_CONCURRENT_CHANGE');

/**
 * True for a `PreparedStatementsUnsupportedError`: a transaction-mode pooler dropped a prepared
 * statement; nothing was committed.
 *
 * @example
 * if (isPreparedStatementsUnsupported(error)) log.warn('set prepare: false on the adapter (fromPg(pool, { prepare: false }))');
 */
export const isPreparedStatementsUnsupported = (e: unknown): e is PreparedStatementsUnsupportedError =>
  hasCode(e, 'IDEM_PREPARED_STATEMENTS_UNSUPPORTED');

/**
 * True for a `CommitOutcomeUnknownError`: COMMIT's connection died; retry with the same key.
 *
 * @example
 * if (isCommitOutcomeUnknown(error)) return res.status(503).set('Retry-After', '1').end(); // the retry reads the key
 */
export const isCommitOutcomeUnknown = (e: unknown): e is CommitOutcomeUnknownError =>
  hasCode(e, 'IDEM_COMMIT_UNKNOWN');

/**
 * True for a `MigrationError`: applying idem's migrations failed (the schema is left as the last
 * migration that committed left it).
 *
 * @example
 * if (isMigrationError(error)) process.exit(1);
 */
export const isMigrationError = (e: unknown): e is MigrationError => hasCode(e, 'IDEM_MIGRATION_FAILED');

/** Names an operation: who, what, and which intent. */
export interface OperationScope {
  tenant: string;
  operation: string;
  key: string;
}

/** Points at what an operation created, e.g. `{ type: 'payment', id: 'pay_123' }`. */
export interface ResourcePointer {
  type: string;
  id: string;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
