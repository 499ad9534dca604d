import { InvalidArgumentError } from './errors.js';

/** Schema names are plain lower-case identifiers, so quoting can never be escaped from. */
const identifier = /^[a-z_][a-z0-9_]{0,62}$/;

/** Validates a schema name and returns it double-quoted for SQL. Default schema: `idem`. */
export function quoteSchema(schema: string): string {
  if (!identifier.test(schema)) {
    throw new InvalidArgumentError(
      `schema name must match ${identifier.source} (lower-case letters, digits, underscores; at most 63)`,
    );
  }
  return `"${schema}"`;
}

export const defaultSchema = 'idem';
