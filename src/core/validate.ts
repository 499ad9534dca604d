/** Checks of numeric options, with one wording for every module's error. */
import { InvalidArgumentError } from './errors.js';

/** `value` when it is a finite number > 0; otherwise an `InvalidArgumentError` naming `name`. */
export function positive(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0)
    throw new InvalidArgumentError(`${name} must be a positive number`);
  return value;
}

/** `value` when it is a finite number >= 0. */
export function nonNegative(name: string, value: number): number {
  if (!Number.isFinite(value) || value < 0)
    throw new InvalidArgumentError(`${name} must be a non-negative number`);
  return value;
}

/** `value` when it is a safe integer > 0. */
export function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value <= 0)
    throw new InvalidArgumentError(`${name} must be a positive integer`);
  return value;
}
