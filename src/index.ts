/**
 * idem: one business effect per business intent, on PostgreSQL transactions.
 * See README.md for the guarantees and the quick start.
 */
export type { Queryable, QueryResult, Row, Sql, Transaction } from './core/sql.js';
export { systemClock, type Clock } from './core/clock.js';
export * from './core/errors.js';
export { isRetryable, retryableNetworkCodes } from './core/retryable.js';
export {
  classifyFailure,
  databaseFailureRules,
  driverFailureRules,
  type DriverFailureRule,
  type FailureClass,
  type FailureKind,
  type FailureRule,
} from './core/failures.js';
export { SqlState, sqlStateOf, isTransactionRetryable } from './core/sqlstate.js';
export { fingerprint, type FingerprintOptions } from './core/fingerprint.js';
export { deriveKey, validateKey, maxKeyLength } from './core/keys.js';
export {
  migrate,
  migrations,
  migrationScript,
  type Migration,
  type MigrateResult,
} from './migrate/migrate.js';
export { quoteSchema, defaultSchema } from './core/schema-name.js';
export { createIdem, type Idem, type OperationContext, type PreparedSpec } from './operations/idem.js';
export type { CallContext, MultiStepOperation } from './operations/multi-step.js';
export type {
  DefineOptions,
  DefinedBody,
  DefinedSpec,
  GiveUpAction,
  OperationDefinition,
} from './operations/definitions.js';
export {
  createCompleter,
  type Completer,
  decideIntent,
  type CompleterOptions,
  type Completion,
  type CompletionKind,
  type PendingIntent,
} from './operations/completer.js';
export { defaultTransactionTimeouts, type TransactionTimeouts } from './core/transaction-timeouts.js';
export { defaultRetention } from './operations/options.js';
export type { IdemOptions, OperationSpec, RetentionPolicy } from './operations/options.js';
export { completed, refused, isOutcome } from './operations/outcome.js';
export type { Outcome, OutcomeOptions, OperationResult, FinalState } from './operations/outcome.js';
export type { RequestRow } from './operations/request-row.js';
export type { SweepOptions, SweepResult } from './operations/sweep.js';
export type { OperationEvent, OperationEventKind } from './observability/events.js';
export {
  createEvents,
  type IdemEvents,
  type IdemEventMap,
  type IdemEventName,
  type IdemEventListener,
  type IdemErrorEvent,
} from './core/event-channel.js';
export { causationHeaders, onBehalfOf, type Causation } from './core/causation.js';
export * from './trace/index.js';
