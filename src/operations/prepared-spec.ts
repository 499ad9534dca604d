import { currentCausation, type Causation } from '../core/causation.js';
import { InvalidArgumentError, type OperationScope } from '../core/errors.js';
import { fingerprint as computeFingerprint } from '../core/fingerprint.js';
import { validateKey, validateName } from '../core/keys.js';
import { nonNegative } from '../core/validate.js';
import {
  defaultRetention,
  type IdemOptions,
  type OperationSpec,
  type ReadFirst,
  type Recording,
  type RetentionPolicy,
} from './options.js';

/** A prepared call: validated scope, fingerprint and retention. */
export interface PreparedSpec {
  scope: OperationScope;
  fingerprint: string;
  retention: RetentionPolicy;
  waitMs: number;
  transactionRetries: number;
  /** How `run`/`runIn` record the key. `steps` always claims first. */
  recording: Recording;
  /** Whether `run`/`runIn` read the key before executing. */
  readFirst: ReadFirst;
  /**
   * What the key's row names as its cause: the intent the call was made in (a consumer's or a
   * task's handler, another operation's step), and the trace context it came in.
   */
  cause: Causation;
}

/** What an `Idem` gives a call that leaves it out: its `IdemOptions`, validated. */
export interface SpecDefaults {
  waitMs: number;
  minKeyLength: number;
  transactionRetries: number;
  retention: IdemOptions['retention'];
  recording: Recording;
  readFirst: ReadFirst;
}

/** Validates a spec and computes its fingerprint and retention. */
export function prepareSpec(spec: OperationSpec, defaults: SpecDefaults): PreparedSpec {
  validateName('tenant', spec.tenant);
  validateName('operation', spec.operation);
  validateKey(spec.key, defaults.minKeyLength);
  const fingerprint =
    typeof spec.fingerprint === 'string'
      ? spec.fingerprint
      : computeFingerprint(spec.request ?? null, spec.fingerprint);
  const base =
    typeof defaults.retention === 'function' ? defaults.retention(spec.operation) : defaults.retention;
  const retention = { ...defaultRetention, ...base, ...spec.retention };
  if (!(retention.resultMs > 0 && retention.tombstoneMs >= retention.resultMs)) {
    throw new InvalidArgumentError('retention needs resultMs > 0 and tombstoneMs >= resultMs');
  }
  return {
    scope: { tenant: spec.tenant, operation: spec.operation, key: spec.key },
    fingerprint,
    retention,
    waitMs: nonNegative('waitMs', spec.waitMs ?? defaults.waitMs),
    transactionRetries: nonNegative(
      'transactionRetries',
      spec.transactionRetries ?? defaults.transactionRetries,
    ),
    recording: spec.recording === undefined ? defaults.recording : recordingOf(spec.recording),
    readFirst: spec.readFirst === undefined ? defaults.readFirst : readFirstOf(spec.readFirst),
    cause: currentCausation(),
  };
}

export function recordingOf(value: Recording): Recording {
  if (value !== 'commit' && value !== 'claim') {
    throw new InvalidArgumentError("recording must be 'commit' or 'claim'");
  }
  return value;
}

export function readFirstOf(value: ReadFirst): ReadFirst {
  if (value !== true && value !== false && value !== 'auto') {
    throw new InvalidArgumentError("readFirst must be true, false or 'auto'");
  }
  return value;
}
