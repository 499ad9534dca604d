/**
 * idem/workflow: sagas whose compensations are persisted before their steps run, with a derived
 * idempotency key for every action and compensation; and helpers for Temporal activities.
 */
export {
  defineSaga,
  step,
  type ActionCallContext,
  type ActionContext,
  type ActionRecordContext,
  type CallAction,
  type CallCompensation,
  type CompensationCallContext,
  type CompensationContext,
  type CompensationFacts,
  type CompensationRecordContext,
  type LocalAction,
  type LocalCompensation,
  type StepContext,
  type SagaDefinition,
  type SagaPoint,
  type SagaRef,
  type SagaStep,
} from './definition.js';
export { createSagas } from './sagas.js';
export type {
  Sagas,
  ListSagasOptions,
  RecoveredSaga,
  SagaRunSpec,
  SagaStarted,
  SagasOptions,
} from './sagas.js';
export { stepKeys, type SagaResult } from './execution.js';
export type { SagaRecord, SagaStatus, SagaStepRecord, SagaStepState } from './saga-record.js';
export { SagaFailedError, SagaStuckError, isSagaFailed, isSagaStuck } from './errors.js';
export type { SweepOptions, SweepResult } from '../core/sweeper.js';
export { activityKey, activityScope, runActivity, runActivityCall, runActivitySteps } from './temporal.js';
export type {
  ActivityCallRun,
  ActivityContextLike,
  ActivityKeyOptions,
  ActivityRun,
  RunActivityCallOptions,
  RunActivityOptions,
} from './temporal.js';
