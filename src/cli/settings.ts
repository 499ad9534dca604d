/** Settings read from the environment by the `idem` command (and by the demo, which reads the same ones). */
import { InvalidArgumentError } from '../core/errors.js';

/**
 * Reads a true/false setting: true/false, on/off, yes/no, 1/0 (any case); unset or empty is the
 * default. Anything else is refused, so a typo never silently keeps the default.
 */
export function booleanSetting(name: string, value: string | undefined, fallback: boolean): boolean {
  if (value === undefined || value.trim() === '') return fallback;
  const normalized = value.trim().toLowerCase();
  if (['true', 'on', 'yes', '1'].includes(normalized)) return true;
  if (['false', 'off', 'no', '0'].includes(normalized)) return false;
  throw new InvalidArgumentError(`${name} must be true or false, not ${JSON.stringify(value)}`);
}
