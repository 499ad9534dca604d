/** Query parameters of the console's API, validated before they reach a statement. */
import { InvalidArgumentError } from '../core/errors.js';

export type Query = Record<string, unknown>;

/** An exact-match filter: 1–200 characters without control characters, or undefined when empty. */
export function optionalName(query: Query, name: string): string | undefined {
  const value = query[name];
  if (value === undefined || value === '') return undefined;
  // eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
  if (typeof value !== 'string' || value.length > 255 || /[\x00-\x1f\x7f]/.test(value)) {
    throw new InvalidArgumentError(`${name} must be 1–255 characters without control characters`);
  }
  return value;
}

export function requiredName(query: Query, name: string): string {
  const value = optionalName(query, name);
  if (value === undefined) throw new InvalidArgumentError(`${name} is required`);
  return value;
}

export function oneOf<T extends string>(query: Query, name: string, allowed: readonly T[]): T | undefined {
  const value = query[name];
  if (value === undefined || value === '') return undefined;
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw new InvalidArgumentError(`${name} must be one of ${allowed.join(', ')}`);
  }
  return value as T;
}

/** Rows per page: 1–500, default 50. */
export function limit(query: Query, fallback = 50): number {
  const value = query.limit;
  if (value === undefined || value === '') return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 500) throw new InvalidArgumentError('limit must be 1–500');
  return n;
}

const units: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration like `90s`, `15m`, `2h`, `7d` (or plain seconds), in ms. */
export function duration(query: Query, name: string): number | undefined {
  const value = query[name];
  if (value === undefined || value === '') return undefined;
  const match = typeof value === 'string' ? /^(\d{1,9})([smhd]?)$/.exec(value) : null;
  if (!match) throw new InvalidArgumentError(`${name} must be a duration such as 90s, 15m, 2h or 7d`);
  return Number(match[1]) * (units[match[2] || 's'] ?? 1000);
}

/** The keyset cursor of the requests list: the last row's created_at (exact text) and key. */
export interface RequestCursor {
  createdAt: string;
  tenant: string;
  operation: string;
  key: string;
}

export function encodeCursor(cursor: RequestCursor): string {
  return Buffer.from(
    JSON.stringify([cursor.createdAt, cursor.tenant, cursor.operation, cursor.key]),
  ).toString('base64url');
}

export function decodeCursor(query: Query): RequestCursor | undefined {
  const value = query.cursor;
  if (value === undefined || value === '') return undefined;
  try {
    const parsed = JSON.parse(
      Buffer.from(typeof value === 'string' ? value : '', 'base64url').toString('utf8'),
    ) as unknown;
    if (Array.isArray(parsed) && parsed.length === 4 && parsed.every((p) => typeof p === 'string')) {
      const [createdAt, tenant, operation, key] = parsed as [string, string, string, string];
      if (/^\d{4}-\d{2}-\d{2}[ T][0-9:.]+(Z|[+-]\d{2}(:?\d{2})?)?$/.test(createdAt))
        return { createdAt, tenant, operation, key };
    }
  } catch {
    // fall through
  }
  throw new InvalidArgumentError('cursor is malformed');
}
