import { IdemError } from '../core/errors.js';
import type { CapturedResponse } from './captured-response.js';

/**
 * The stored form of an HTTP response. The status and the selected headers go into the operation's
 * JSON result; the body goes into the binary `body` column untouched, so a replay sends the very
 * bytes of the first answer (no re-serialisation, whatever the content type).
 */
export interface StoredResponseMeta {
  /** Format version, for readers of older rows. */
  v: 1;
  status: number;
  headers: [string, string][];
}

export function storedMeta(status: number, headers: [string, string][]): StoredResponseMeta {
  return { v: 1, status, headers };
}

/** Rebuilds a response from a stored row; refuses a row another kind of writer left. */
export function restoreResponse(value: unknown, body: Uint8Array | null): CapturedResponse {
  const meta = value as Partial<StoredResponseMeta> | null;
  if (
    !meta ||
    meta.v !== 1 ||
    typeof meta.status !== 'number' ||
    !Array.isArray(meta.headers) ||
    !meta.headers.every((h) => Array.isArray(h) && h.length === 2)
  ) {
    throw new IdemError(
      'IDEM_INVALID_ARGUMENT',
      'the stored result of this key is not an HTTP response (was the key used outside the HTTP integration?)',
    );
  }
  return {
    status: meta.status,
    headers: meta.headers.map(([n, v]) => [n, v]),
    body: body ?? new Uint8Array(0),
  };
}
