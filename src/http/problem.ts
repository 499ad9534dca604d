import type { IdemErrorCode, ResourcePointer } from '../core/errors.js';
import { problemJson, problemMediaType } from '../core/problem-type.js';
import type { CapturedResponse } from './captured-response.js';

/**
 * Every answer idem gives instead of the handler's is an RFC 9457 problem document
 * (`application/problem+json`) with a stable `type` URI and a stable `code`. Clients branch on
 * `type` (or `code`), never on `title` or `detail`.
 */
export const problemKinds = {
  'key-missing': { status: 400, code: 'IDEM_KEY_MISSING', title: 'Idempotency key missing' },
  'key-malformed': { status: 400, code: 'IDEM_KEY_MALFORMED', title: 'Idempotency key malformed' },
  'key-too-long': { status: 400, code: 'IDEM_KEY_TOO_LONG', title: 'Idempotency key too long' },
  'key-multiple': { status: 400, code: 'IDEM_KEY_MULTIPLE', title: 'More than one idempotency key' },
  'tenant-missing': { status: 400, code: 'IDEM_TENANT_MISSING', title: 'Tenant not resolved' },
  'body-malformed': { status: 400, code: 'IDEM_BODY_MALFORMED', title: 'Request body malformed' },
  'body-too-large': { status: 413, code: 'IDEM_BODY_TOO_LARGE', title: 'Request body too large' },
  'media-type-unsupported': {
    status: 415,
    code: 'IDEM_MEDIA_TYPE_UNSUPPORTED',
    title: 'Request media type unsupported',
  },
  'key-reused': {
    status: 422,
    code: 'IDEM_KEY_REUSED',
    title: 'Idempotency key reused with a different request',
  },
  'in-progress': { status: 409, code: 'IDEM_IN_PROGRESS', title: 'Request with this key in progress' },
  'result-expired': {
    status: 409,
    code: 'IDEM_EXPIRED',
    title: 'Stored response for this key expired',
  },
  fenced: { status: 409, code: 'IDEM_FENCED', title: 'Request taken over by a retry' },
  'step-failed': { status: 500, code: 'IDEM_STEP_FAILED', title: 'Request failed for good part-way' },
  'commit-failed': { status: 503, code: 'IDEM_COMMIT_FAILED', title: 'Commit failed; nothing stored' },
  unavailable: { status: 503, code: 'IDEM_UNAVAILABLE', title: 'Idempotency store unavailable' },
  internal: { status: 500, code: 'IDEM_INTERNAL', title: 'Idempotency processing failed' },
} as const satisfies Record<string, { status: number; code: IdemErrorCode; title: string }>;

export type ProblemKind = keyof typeof problemKinds;

export { defaultProblemTypeBase } from '../core/problem-type.js';

/** An RFC 9457 problem document as idem writes it. */
export interface ProblemDocument {
  type: string;
  title: string;
  status: number;
  detail: string;
  /** Stable machine code, e.g. `IDEM_KEY_REUSED`. */
  code: string;
  /** Whether the same request may succeed later (409 in-progress, 503). */
  retryable: boolean;
  /** Seconds, mirrored from the `Retry-After` header when there is one. */
  retryAfter?: number;
  /** On `result-expired`: what the original request created, when it said so. */
  resource?: ResourcePointer;
  /** On `result-expired`: when the original request completed (RFC 3339). */
  completedAt?: string;
}

export interface ProblemExtras {
  retryAfterSeconds?: number;
  resource?: ResourcePointer | null;
  completedAt?: number | null;
}

const encoder = new TextEncoder();

/** Builds the response for a problem: status, `application/problem+json`, `Retry-After` if any. */
export function problemResponse(
  kind: ProblemKind,
  detail: string,
  typeBase: string,
  extras: ProblemExtras = {},
): CapturedResponse {
  const { status, code, title } = problemKinds[kind];
  const retryable = status === 503 || kind === 'in-progress' || kind === 'fenced';
  const members: Omit<ProblemDocument, 'type' | 'title' | 'status'> = { detail, code, retryable };
  const headers: [string, string][] = [['content-type', problemMediaType]];
  if (extras.retryAfterSeconds !== undefined) {
    members.retryAfter = extras.retryAfterSeconds;
    headers.push(['retry-after', String(extras.retryAfterSeconds)]);
  }
  if (extras.resource) members.resource = extras.resource;
  if (extras.completedAt != null) members.completedAt = new Date(extras.completedAt).toISOString();
  return { status, headers, body: encoder.encode(problemJson(kind, title, status, members, typeBase)) };
}
