/**
 * Counting effects through a URL the server already has (a list endpoint, a metrics counter), read
 * before and after a drill. This is the only black-box way to see executions that left no trace in
 * the answers.
 */
import { InvalidArgumentError } from '../core/errors.js';
import { excerpt, isSuccess } from './answers.js';
import type { HeaderList } from './headers.js';
import type { DrillClient } from './http-client.js';

/** The count URL did not give a count; the drill that needed it fails with this message. */
export class CountUnavailableError extends InvalidArgumentError {}

const countFields = ['count', 'total', 'total_count', 'totalCount'];
const listFields = ['data', 'items', 'results'];

/** Reads the count with GET. Throws `CountUnavailableError` with the evidence when it cannot. */
export async function readCount(
  client: DrillClient,
  url: URL,
  headers: HeaderList,
  path: string | null,
): Promise<number> {
  const answer = await client.send({ url, method: 'GET', headers, body: null });
  if (!isSuccess(answer)) {
    const why =
      answer.status === 0 ? (answer.error ?? 'no answer') : `${answer.status} ${excerpt(answer.body)}`;
    throw new CountUnavailableError(`count URL ${url.href} answered ${why}`);
  }
  const count = parseCount(answer.body, path);
  if (count === undefined) {
    throw new CountUnavailableError(
      `count URL ${url.href} answered no count${path ? ` at '${path}'` : ''}: ${excerpt(answer.body)}`,
    );
  }
  return count;
}

/**
 * A count from a body: a bare number; a JSON number or array; an object with a count field or a
 * list field; or the value at a dotted `path`, where a final `length` counts an array.
 */
export function parseCount(body: Buffer, path: string | null = null): number | undefined {
  const text = body.toString('utf8').trim();
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (path !== null) {
    for (const part of path.split('.').filter(Boolean)) {
      if (Array.isArray(value) && part === 'length') return value.length;
      if (value === null || typeof value !== 'object') return undefined;
      value = (value as Record<string, unknown>)[part];
    }
    return asCount(Array.isArray(value) ? value.length : value);
  }
  if (Array.isArray(value)) return value.length;
  if (value !== null && typeof value === 'object') {
    const record = value as Record<string, unknown>;
    for (const field of countFields) if (asCount(record[field]) !== undefined) return asCount(record[field]);
    for (const field of listFields) if (Array.isArray(record[field])) return record[field].length;
    return undefined;
  }
  return asCount(value);
}

function asCount(value: unknown): number | undefined {
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  if (typeof value === 'string' && /^\d+$/.test(value)) return Number(value);
  return undefined;
}
