import { systemClock, type Clock } from '../core/clock.js';
import { createEvents, type IdemEvents } from '../core/event-channel.js';
import { validateKey } from '../core/keys.js';
import { positiveInteger } from '../core/validate.js';
import type { BackoffOptions } from '../core/resilience/backoff.js';
import { retryDelay } from '../core/resilience/retry-after.js';
import { sleepUnlessAborted } from '../core/resilience/sleep.js';
import { DecorrelatedJitter } from './backoff.js';
import { Breaker, type BreakerOptions } from './breaker.js';
import { classifyError, classifyResponse, type Classification } from '../core/resilience/classify.js';
import { HttpStatusError } from './errors.js';
import { currentIdempotencyKey, subKey } from '../core/key-context.js';
import { RetryBudget, type RetryBudgetOptions } from './retry-budget.js';

/** The `fetch` this client wraps. Default: Node's global fetch (undici). */
export type FetchLike = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** Options of `createResilientClient`. */
export interface ClientOptions {
  /** Default: `globalThis.fetch` (undici in Node 20+). Pass undici's own `fetch` to use a custom `Agent`. */
  fetch?: FetchLike;
  /** Prefix for relative URLs, e.g. `http://127.0.0.1:8080`. Default: none (URLs must be absolute). */
  baseUrl?: string;
  /** Time source for backoff waits, the retry budget and the breakers' open period. Default: the system clock. */
  clock?: Clock;
  /** Attempts per call, the first included. Default 4. */
  maxAttempts?: number;
  /**
   * Backoff between retries. Default `{ strategy: 'decorrelated', baseMs: 100, maxMs: 10000 }`
   * (Polly's DecorrelatedJitterV2).
   */
  backoff?: BackoffOptions;
  /**
   * The longest wait a `Retry-After` may ask for, in ms: a longer ask is capped to it (the retry
   * happens after this long). Default 30000. A wait is never shorter than the backoff's.
   */
  maxRetryAfterMs?: number;
  /** The retry budget shared by every call of this client. See `RetryBudgetOptions`. */
  retryBudget?: RetryBudgetOptions | RetryBudget;
  /** The circuit breaker, one per origin (scheme://host:port). `false` turns it off. */
  breaker?: BreakerOptions | false;
  /** Per-attempt timeout, in ms. Default 10000. A timed-out attempt is retryable. */
  timeoutMs?: number;
  /** Header the key travels in. Default `Idempotency-Key` (PayPal uses `PayPal-Request-Id`). */
  keyHeader?: string;
  /**
   * How the key is written: `sf-string` (`"key"`, the IETF draft's structured-field string) or
   * `bare` (`key`, as Stripe documents it). Default `sf-string`.
   */
  keyFormat?: 'sf-string' | 'bare';
  /**
   * Where every retry is reported before its wait, as a `client:retry` event (for logs and
   * metrics). Default: none (pass the application's channel, `createEvents()`).
   */
  events?: IdemEvents;
}

/** One planned retry: the payload of `client:retry`. */
export interface RetryEvent {
  /** The URL called; absent for `retry`. */
  url?: string;
  /** The request's method, upper-case; absent for `retry`. */
  method?: string;
  /** The attempt that failed (1 = first). */
  attempt: number;
  /** The wait before the next attempt, in ms. */
  delayMs: number;
  /** Why, e.g. `http 503` or `ECONNRESET` (see `classifyError`). */
  reason: string;
  /** True when the delay came from the downstream's Retry-After. */
  fromRetryAfter: boolean;
  /** What the failed attempt threw; absent when it was answered (a 503, a 429). */
  error?: unknown;
}

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /**
     * The resilient client (or `retry`) is about to wait `delayMs` and try again after a
     * retryable failure. Only retries are reported: the final outcome is the caller's.
     */
    'client:retry': RetryEvent;
  }
}

/** `fetch`'s init plus the client's own per-call options. */
export interface ClientRequestInit extends RequestInit {
  /**
   * The idempotency key. Default: the current key (`withIdempotencyKey`, a saga step, a Temporal
   * activity), on unsafe methods only. `null` sends none. An `Idempotency-Key` already present
   * in `headers` wins over both.
   */
  idempotencyKey?: string | null;
  /**
   * Names this call inside the current step when the step makes several external calls: the
   * key becomes a stable derivative of the step's key and this name.
   */
  keyName?: string;
  /** Overrides `maxAttempts` for this call; `false` or 1 never retries. */
  retry?: false | { maxAttempts?: number };
  /** Overrides `timeoutMs` for this call. */
  timeoutMs?: number;
}

/** Methods RFC 9110 defines as idempotent: a repeat has the effect of one request. */
const idempotentMethods: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']);
const safeMethods: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE']);

/**
 * An outgoing HTTP client for calls to downstream services. It attaches an idempotency key
 * derived from the current operation or step; retries only what is retryable (408, 425, 429,
 * 5xx except 501, timeouts, network errors), with decorrelated jitter, inside a retry budget,
 * honouring `Retry-After` up to a cap; never retries a non-idempotent method sent without a key;
 * and fails fast behind a per-origin circuit breaker.
 *
 * Like `fetch`, it resolves with the final response whatever its status (use `assertOk` to
 * turn a failing one into a classified `HttpStatusError`), and rejects with the last network
 * error, or `CircuitOpenError` when the breaker refuses the call.
 *
 * @example
 * const payments = createResilientClient({ baseUrl: 'http://127.0.0.1:4000' });
 * await sagas.run(checkout, { tenant, key, input }); // inside a step:
 * const res = await payments.fetch('/charges', { method: 'POST', body: JSON.stringify(charge) });
 */
export class ResilientClient {
  private readonly fetchImpl: FetchLike;
  private readonly clock: Clock;
  private readonly budget: RetryBudget;
  private readonly breakers = new Map<string, Breaker>();
  private readonly maxAttempts: number;
  private readonly maxRetryAfterMs: number;
  private readonly timeoutMs: number;
  private readonly keyHeader: string;
  private readonly events: IdemEvents;

  constructor(private readonly options: ClientOptions = {}) {
    this.events = options.events ?? createEvents();
    this.fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.clock = options.clock ?? systemClock;
    this.budget =
      options.retryBudget instanceof RetryBudget
        ? options.retryBudget
        : new RetryBudget({ clock: this.clock, ...options.retryBudget });
    this.maxAttempts = positiveInteger('maxAttempts', options.maxAttempts ?? 4);
    this.maxRetryAfterMs = options.maxRetryAfterMs ?? 30_000;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.keyHeader = options.keyHeader ?? 'Idempotency-Key';
  }

  /** The breaker of an origin (created on first use), or undefined when breakers are off. */
  breaker(origin: string): Breaker | undefined {
    if (this.options.breaker === false) return undefined;
    let breaker = this.breakers.get(origin);
    if (!breaker) {
      breaker = new Breaker(origin, { ...(this.options.breaker || {}), clock: this.clock });
      this.breakers.set(origin, breaker);
    }
    return breaker;
  }

  /** `fetch` with keys, classification, retries, budget and breaker. See the class comment. */
  async fetch(input: string | URL, init: ClientRequestInit = {}): Promise<Response> {
    const url =
      this.options.baseUrl && typeof input === 'string'
        ? new URL(input, this.options.baseUrl)
        : new URL(input);
    const method = (init.method ?? 'GET').toUpperCase();
    const headers = new Headers(init.headers);
    const key = this.resolveKey(method, headers, init);
    if (key !== undefined) headers.set(this.keyHeader, this.options.keyFormat === 'bare' ? key : `"${key}"`);
    const replayableBody =
      init.body === undefined || init.body === null || !(init.body instanceof ReadableStream);
    // The rule that matters most: a POST or PATCH without a key is sent once. If its answer is
    // lost, only the caller can tell whether a repeat is a new intent.
    const mayRetry = replayableBody && (idempotentMethods.has(method) || key !== undefined);
    const maxAttempts =
      init.retry === false ? 1 : positiveInteger('maxAttempts', init.retry?.maxAttempts ?? this.maxAttempts);
    const breaker = this.breaker(url.origin);
    const jitter = new DecorrelatedJitter(this.options.backoff);
    const { idempotencyKey: _k, keyName: _n, retry: _r, timeoutMs: _t, ...fetchInit } = init;
    this.budget.recordRequest();

    for (let attempt = 1; ; attempt++) {
      const outcome = await (breaker
        ? breaker.execute(() => this.attempt(url, { ...fetchInit, method, headers }, init))
        : this.attempt(url, { ...fetchInit, method, headers }, init));
      if (!outcome.classification.retryable) return settle(outcome);
      if (!mayRetry || attempt >= maxAttempts || init.signal?.aborted) return settle(outcome);
      const retryAfter = outcome.classification.retryAfterMs;
      if (!this.budget.tryRetry()) return settle(outcome);
      const delayMs =
        retryAfter === undefined ? jitter.next() : retryDelay(0, retryAfter, this.maxRetryAfterMs);
      this.events.emit('client:retry', {
        url: url.href,
        method,
        attempt,
        delayMs,
        reason: outcome.classification.reason,
        fromRetryAfter: retryAfter !== undefined,
        ...(outcome.response ? {} : { error: outcome.error }),
      });
      // Free the connection: an unread body keeps the socket busy.
      await outcome.response?.body?.cancel().catch(() => undefined);
      await sleepUnlessAborted(this.clock, delayMs, init.signal ?? undefined);
      if (init.signal?.aborted) throw init.signal.reason;
    }
  }

  private resolveKey(method: string, headers: Headers, init: ClientRequestInit): string | undefined {
    const present = headers.get(this.keyHeader);
    if (present !== null) return undefined; // the caller's own header is sent as it is
    if (init.idempotencyKey === null) return undefined;
    let key = init.idempotencyKey;
    if (key === undefined) {
      if (safeMethods.has(method)) return undefined;
      const current = currentIdempotencyKey();
      if (current === undefined) return undefined;
      key = init.keyName ? subKey(current, init.keyName) : current;
    } else if (init.keyName) {
      key = subKey(key, init.keyName);
    }
    validateKey(key);
    return key;
  }

  private async attempt(url: URL, requestInit: RequestInit, init: ClientRequestInit): Promise<Attempt> {
    const timeout = AbortSignal.timeout(init.timeoutMs ?? this.timeoutMs);
    const signal = init.signal ? AbortSignal.any([init.signal, timeout]) : timeout;
    try {
      const response = await this.fetchImpl(url, { ...requestInit, signal });
      const classification = classifyResponse(response, this.clock.now());
      return { response, classification, unhealthy: classification.unhealthy };
    } catch (error) {
      const classification = classifyError(error);
      return { error, classification, unhealthy: classification.unhealthy };
    }
  }
}

interface Attempt {
  response?: Response;
  error?: unknown;
  classification: Classification;
  unhealthy: boolean;
}

function settle(outcome: Attempt): Response {
  if (outcome.response) return outcome.response;
  throw outcome.error;
}

/**
 * Creates a client. One per downstream service is the usual shape (its breaker is per origin).
 *
 * @example
 * const payments = createResilientClient({ baseUrl: 'https://payments.example', maxAttempts: 4 });
 * const res = await payments.fetch('/charges', { method: 'POST', idempotencyKey: deriveKey(scope, 'charge'), body });
 */
export function createResilientClient(options: ClientOptions = {}): ResilientClient {
  return new ResilientClient(options);
}

/**
 * Returns the response when it is 2xx; otherwise reads its body (up to 4 KiB) and throws an
 * `HttpStatusError` whose `retryable` and `retryAfterMs` follow the classification, so a saga
 * step or a task handler that throws it is retried or compensated correctly.
 */
export async function assertOk(response: Response, clock: Clock = systemClock): Promise<Response> {
  if (response.ok) return response;
  const classification = classifyResponse(response, clock.now());
  const body = (await response.text().catch(() => '')).slice(0, 4096);
  throw new HttpStatusError(
    response.status,
    response.url,
    classification.retryable,
    classification.retryAfterMs,
    body,
  );
}
