/**
 * The answer of a defined operation run over HTTP (`req.idem.run(definition, input)` in steps
 * mode): the response as the operation's outcome, so that a completer that finishes the
 * operation without the client stores the very response the client gets when it retries.
 */
import { InvalidArgumentError, IdemError, type ResourcePointer } from '../core/errors.js';
import { completed, refused, type Outcome } from '../operations/outcome.js';
import type { CapturedResponse } from './captured-response.js';
import { defaultStore } from './options.js';
import { defaultReplayHeaders, selectReplayHeaders } from './response-headers.js';
import { restoreResponse, storedMeta, type StoredResponseMeta } from './stored-response.js';

const encoder = new TextEncoder();
const replayed = new Set(defaultReplayHeaders);

/** Options of `httpAnswer`. */
export interface HttpAnswerOptions {
  /**
   * Response headers. Those the default `replayHeaders` keep (`content-type`, `location`, …) are
   * stored and replayed; the others are sent on the first answer only. Default: `content-type:
   * application/json` for a body that is not bytes or a string.
   */
  headers?: Record<string, string>;
  /**
   * What the operation created; the key's tombstone keeps it after the stored response expires.
   * Default: the `location` header, as `{ type: 'location', id }`, when there is one.
   */
  resource?: ResourcePointer;
}

/**
 * A response as a defined operation's outcome: `status`, the body (bytes and strings as they are,
 * anything else as JSON) and headers. Stored as the default store policy says: 2xx/3xx completed,
 * 4xx a business refusal (except 408, 409, 425, 429), and 5xx not at all (it throws a retryable
 * error: the intent stays pending, and a retry or the completer tries again).
 *
 * @example
 * return httpAnswer(201, payment, { headers: { location: `/v1/payments/${payment.id}` } });
 */
export function httpAnswer(
  status: number,
  body: unknown,
  options: HttpAnswerOptions = {},
): Outcome<StoredResponseMeta> {
  if (!Number.isInteger(status) || status < 200 || status > 599) {
    throw new InvalidArgumentError(`httpAnswer needs a status from 200 to 599 (got ${status})`);
  }
  const bytes =
    body instanceof Uint8Array
      ? body
      : typeof body === 'string'
        ? encoder.encode(body)
        : encoder.encode(JSON.stringify(body ?? null));
  const headers: [string, string][] = Object.entries(options.headers ?? {}).map(([n, v]) => [
    n.toLowerCase(),
    String(v),
  ]);
  if (
    !(body instanceof Uint8Array) &&
    typeof body !== 'string' &&
    !headers.some(([n]) => n === 'content-type')
  ) {
    headers.unshift(['content-type', 'application/json; charset=utf-8']);
  }
  const decision = defaultStore(status);
  if (decision === 'discard') {
    throw new IdemError('IDEM_HTTP_STATUS', `answer ${status} is not stored; the intent stays pending`, {
      retryable: true,
    });
  }
  const meta = storedMeta(status, selectReplayHeaders(headers, replayed));
  const location = headers.find(([n]) => n === 'location');
  const resource = options.resource ?? (location ? { type: 'location', id: location[1] } : undefined);
  const extras = { body: bytes, ...(resource ? { resource } : {}) };
  const outcome = decision === 'completed' ? completed(meta, extras) : refused(meta, extras);
  sentHeaders.set(outcome, headers);
  return outcome;
}

/** Every header an answer was given, for the first response (the stored meta keeps the replayed ones). */
const sentHeaders = new WeakMap<object, [string, string][]>();

/** The response to send for an answer: its status, every header it was given, its body bytes. */
export function answerResponse(outcome: Outcome<unknown>): CapturedResponse {
  const response = restoreResponse(outcome.value, outcome.body ?? null);
  const headers = sentHeaders.get(outcome);
  return headers ? { ...response, headers: headers.map(([n, v]) => [n, v]) } : response;
}
