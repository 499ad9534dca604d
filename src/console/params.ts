/**
 * Query parameters of the console's API, validated before they reach a statement: every refusal
 * is an `InvalidParameterError` (a 400 problem naming the parameter), never a database error. A
 * value that passes is one PostgreSQL accepts: no NUL or other control character, dates that
 * exist, durations that fit in a timestamp.
 */
import { InvalidArgumentError } from '../core/errors.js';

export type Query = Record<string, unknown>;

/** A refused parameter; the console answers 400 with `invalid-params: [{ name, reason }]`. */
export class InvalidParameterError extends InvalidArgumentError {
  constructor(
    readonly parameter: string,
    readonly reason: string,
  ) {
    super(`${parameter} ${reason}`);
  }
}

/** Parameters every route accepts besides its own: the token (see access.ts). */
const everywhere = ['token'];

/** Refuses a parameter the route does not read, so a typo never silently widens a filter. */
export function onlyKnown(query: Query, known: readonly string[]): void {
  for (const name of Object.keys(query)) {
    if (!known.includes(name) && !everywhere.includes(name)) {
      throw new InvalidParameterError(
        name,
        `is not a parameter of this route (known: ${known.join(', ') || 'none'})`,
      );
    }
  }
}

// eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
const control = /[\x00-\x1f\x7f-\x9f]/;

/** 1–255 characters without control characters. */
function plainText(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0 && value.length <= 255 && !control.test(value);
}

/** An exact-match filter: 1–255 characters without control characters, or undefined when empty. */
export function optionalName(query: Query, name: string): string | undefined {
  const value = query[name];
  if (value === undefined || value === '') return undefined;
  if (!plainText(value)) {
    throw new InvalidParameterError(name, 'must be given once, 1–255 characters without control characters');
  }
  return value;
}

export function requiredName(query: Query, name: string): string {
  const value = optionalName(query, name);
  if (value === undefined) throw new InvalidParameterError(name, 'is required');
  return value;
}

export function oneOf<T extends string>(query: Query, name: string, allowed: readonly T[]): T | undefined {
  const value = query[name];
  if (value === undefined || value === '') return undefined;
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw new InvalidParameterError(name, `must be one of ${allowed.join(', ')}`);
  }
  return value as T;
}

/** Rows per page: 1–500 in plain digits, default 50. */
export function limit(query: Query, fallback = 50): number {
  const value = query.limit;
  if (value === undefined || value === '') return fallback;
  const n = typeof value === 'string' && /^\d{1,3}$/.test(value) ? Number(value) : NaN;
  if (!(n >= 1 && n <= 500)) throw new InvalidParameterError('limit', 'must be a whole number from 1 to 500');
  return n;
}

const units: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** The longest age a filter may name: far beyond any retention, well inside a timestamp's range. */
export const maxDurationMs = 100 * 365 * units.d!;

/** A duration like `90s`, `15m`, `2h`, `7d` (or plain seconds), in ms; at most 100 years. */
export function duration(query: Query, name: string): number | undefined {
  const value = query[name];
  if (value === undefined || value === '') return undefined;
  const match = typeof value === 'string' ? /^(\d{1,9})([smhd]?)$/.exec(value) : null;
  if (!match) throw new InvalidParameterError(name, 'must be a duration such as 90s, 15m, 2h or 7d');
  const ms = Number(match[1]) * (units[match[2] || 's'] ?? 1000);
  if (ms > maxDurationMs) throw new InvalidParameterError(name, 'must be at most 36500d (100 years)');
  return ms;
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

/**
 * `timestamptz::text` as PostgreSQL writes it (`2030-01-01 00:00:00.123456+00`, any session time
 * zone), or ISO 8601 with `T` and `Z`. Each field is checked against the calendar afterwards: a
 * shape-only check would let `2024-13-45 99:99:99` through to the database.
 */
const timestamp =
  /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.\d{1,6})?(?:Z|[+-](\d{2})(?::?(\d{2}))?(?::?\d{2})?)$/;

function realTimestamp(text: string): boolean {
  const m = timestamp.exec(text);
  if (!m) return false;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const date = new Date(Date.UTC(year, month - 1, day, hour, minute, second));
  return (
    year >= 1 &&
    date.getUTCFullYear() === year &&
    date.getUTCMonth() === month - 1 &&
    date.getUTCDate() === day &&
    date.getUTCHours() === hour &&
    date.getUTCMinutes() === minute &&
    date.getUTCSeconds() === second &&
    Number(m[7] ?? 0) <= 15 &&
    Number(m[8] ?? 0) < 60
  );
}

/**
 * A cursor's tenant, operation and key come back from the table, where they may hold any character
 * PostgreSQL's `text` can (so not NUL).
 */
function storedText(value: unknown): value is string {
  return typeof value === 'string' && value.length <= 10_000 && !value.includes('\0');
}

export function decodeCursor(query: Query): RequestCursor | undefined {
  const value = query.cursor;
  if (value === undefined || value === '') return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(typeof value === 'string' ? value : '', 'base64url').toString('utf8'));
  } catch {
    parsed = undefined;
  }
  if (Array.isArray(parsed) && parsed.length === 4 && parsed.every(storedText)) {
    const [createdAt, tenant, operation, key] = parsed as [string, string, string, string];
    if (realTimestamp(createdAt)) return { createdAt, tenant, operation, key };
  }
  throw new InvalidParameterError(
    'cursor',
    'is malformed: pass the `next` value of the previous page as it is',
  );
}
