import {
  isExpired,
  isFenced,
  isInProgress,
  isInvalidKey,
  isKeyReused,
  isOperationFailed,
  isStepFailed,
} from '../core/errors.js';
import { isPromiseLike, promised } from '../core/promised.js';
import { isRetryable } from '../core/retryable.js';
import { continueTrace } from '../observability/caused-span.js';
import { isRetryableStepFailure } from '../steps/retryable.js';
import type { OperationSpec } from '../operations/options.js';
import { completed, refused, type Outcome } from '../operations/outcome.js';
import { StepsContext, TransactionContext, type IdempotencyContext } from './context.js';
import { parseIdempotencyKey } from './key-header.js';
import {
  resolveOptions,
  type CapturedResponse,
  type IdempotencyOptions,
  type ResolvedOptions,
  type RouteInfo,
} from './options.js';
import { problemResponse, type ProblemExtras, type ProblemKind } from './problem.js';
import { requestFingerprint } from './request-fingerprint.js';
import { replayedHeader, selectReplayHeaders } from './response-headers.js';
import { restoreResponse, storedMeta, type StoredResponseMeta } from './stored-response.js';

/** A request as the framework-neutral engine sees it. */
export interface RequestView<Req> {
  /** The framework's own request (or context), handed to the option callbacks. */
  native: Req;
  method: string;
  /** The matched route pattern, or undefined when the framework cannot tell (then `operation` is needed). */
  route: string | undefined;
  path: string;
  /** Raw query string without `?`. */
  query: string;
  /** Every field line of the key header, as received. */
  keyFields: readonly string[];
  /** The declared `Content-Length`, if any. */
  contentLength: number | undefined;
  /**
   * The request's W3C `traceparent` header, if any: idem's span continues the caller's trace when
   * no span is active already (see `continueTrace`).
   */
  traceparent?: string | undefined;
}

/** A request that passed the checks and may claim its key. */
export interface Ticket {
  key: string;
  tenant: string;
  operation: string;
  method: string;
  route: string;
  path: string;
  query: string;
  /** The request's `traceparent` header (`RequestView.traceparent`). */
  traceparent?: string | undefined;
}

/** Tenant and operation resolved: a refusal to send, or the ticket to claim the key with. */
export type Scoped = { kind: 'answer'; response: CapturedResponse } | { kind: 'admitted'; ticket: Ticket };

/** The first decision: leave the request alone, answer it now, or go on with its key. */
export type Admission =
  { kind: 'pass' } | { kind: 'answer'; response: CapturedResponse } | { kind: 'admitted'; ticket: Ticket };

/** What the integration sends. */
export type Answer =
  /** The handler's own response. `stored` is false when the store policy discarded it (5xx…). */
  | { kind: 'handler'; response: CapturedResponse; stored: boolean }
  /**
   * A stored response, with `Idempotent-Replayed: true`. `afterHandler`: this request's handler
   * ran (commit-time recording found the key recorded by a concurrent duplicate at commit, and
   * rolled the handler's writes back); its captured response must be discarded.
   */
  | { kind: 'replay'; response: CapturedResponse; afterHandler: boolean }
  /** A problem document. `afterHandler`: the handler ran and its response must be discarded. */
  | { kind: 'problem'; response: CapturedResponse; afterHandler: boolean };

/** Runs the handler and resolves with its response once the handler has answered. */
export type Respond<Client> = (context: IdempotencyContext<Client>) => Promise<CapturedResponse>;

const discardBrand = Symbol.for('idem.http.discard');

/** Thrown inside the operation to roll back a response the store policy does not keep. */
class DiscardResponse extends Error {
  readonly [discardBrand] = true;
  /** Not a failure of the intent: the retry must run afresh. */
  readonly retryable = true;
  constructor(status: number) {
    super(`response ${status} is not stored; the handler's writes were rolled back`);
  }
}

/**
 * `idem.run` retries the whole transaction on a serialization failure or deadlock at COMMIT. Over
 * HTTP the handler cannot run twice for one request (its response was already produced), so the
 * second attempt stops here and the client gets the retryable 503.
 */
class HandlerAlreadyRan extends Error {
  readonly retryable = true;
  constructor() {
    super('the transaction failed after the handler ran; it cannot run twice for one request');
  }
}

interface RunState {
  invoked: boolean;
  captured: CapturedResponse | undefined;
  /** Steps mode: the non-retryable step error behind a 5xx answer (see `runHandler`). */
  stepFailure?: unknown;
  /** The transient database failure behind the handler's 500 (see `runHandler`). */
  transientFailure?: unknown;
}

/**
 * The framework-neutral Idempotency-Key contract. The integrations (`idem/express`,
 * `idem/fastify`, `idem/hono`, `idem/node-http`) translate their request and response to and from
 * this engine and keep no logic of their own.
 */
export class HttpIdempotency<Req, Client = unknown> {
  readonly options: ResolvedOptions<Req, Client>;
  /** The `source` of the `error` events this engine reports: `http`, or `nestjs` for the interceptor. */
  private readonly source: string;

  constructor(options: IdempotencyOptions<Req, Client>, source = 'http') {
    this.options = resolveOptions(options);
    this.source = source;
  }

  /**
   * Reports a failure the integration survived (one it answers 500 or 503 for, a response it
   * could not send) as an `error` event on `options.events`, with this engine's source.
   */
  reportError(where: string, error: unknown): void {
    this.options.events.emit('error', { source: this.source, where, error });
  }

  /** A copy with some options replaced, for one route. */
  with(overrides: Partial<IdempotencyOptions<Req, Client>>): HttpIdempotency<Req, Client> {
    const base = this.options;
    return new HttpIdempotency<Req, Client>(
      {
        idem: base.idem,
        tenant: base.tenant,
        operation: base.operation,
        methods: [...base.methods],
        required: base.required,
        keyHeader: base.keyHeader,
        maxBodyBytes: base.maxBodyBytes,
        fingerprint: { exclude: base.exclude, query: base.includeQuery },
        replayHeaders: [...base.replayHeaders],
        store: base.store,
        waitMs: base.waitMs,
        retention: base.retention,
        mode: base.mode,
        ...(base.recording ? { recording: base.recording } : {}),
        readFirst: base.readFirst,
        resource: base.resource,
        problemTypeBase: base.problemTypeBase,
        events: base.events,
        ...(overrides.singleTenant ? { tenant: undefined } : {}),
        ...overrides,
      },
      this.source,
    );
  }

  /** Whether the method is covered. */
  covers(method: string): boolean {
    return this.options.methods.has(method.toUpperCase());
  }

  /** Reads the key header: pass (no key, not required), a 400 answer, or the key. */
  readKey(
    fields: readonly string[],
  ): { kind: 'pass' } | { kind: 'answer'; response: CapturedResponse } | { kind: 'key'; key: string } {
    const parsed = parseIdempotencyKey(fields);
    if (parsed.ok) return { kind: 'key', key: parsed.key };
    if (parsed.reason === 'missing' && !this.options.required) return { kind: 'pass' };
    return { kind: 'answer', response: this.problem(`key-${parsed.reason}`, parsed.detail) };
  }

  /** 413 when the declared length is over the limit, before a byte is read. */
  checkLength(contentLength: number | undefined): CapturedResponse | null {
    if (contentLength === undefined || contentLength <= this.options.maxBodyBytes) return null;
    return this.bodyTooLarge();
  }

  bodyTooLarge(): CapturedResponse {
    return this.problem(
      'body-too-large',
      `the request body is larger than ${this.options.maxBodyBytes} bytes; nothing was stored`,
    );
  }

  bodyMalformed(detail: string): CapturedResponse {
    return this.problem('body-malformed', detail);
  }

  /**
   * Resolves tenant and operation: at once when the tenant resolver answers synchronously (no
   * promise for the integration to wait on), otherwise once its promise settles. A throwing
   * tenant resolver throws here, or rejects (it is the app's error).
   */
  scope(view: RequestView<Req>, key: string): Scoped | Promise<Scoped> {
    const tenant = this.options.tenant(view.native);
    return isPromiseLike(tenant)
      ? Promise.resolve(tenant).then((resolved) => this.scoped(view, key, resolved))
      : this.scoped(view, key, tenant);
  }

  private scoped(view: RequestView<Req>, key: string, tenant: string | undefined): Scoped {
    const method = view.method.toUpperCase();
    if (typeof tenant !== 'string' || tenant === '') {
      return { kind: 'answer', response: this.problem('tenant-missing', 'the request names no tenant') };
    }
    const route = view.route ?? '';
    const info: RouteInfo = { method, route, path: view.path };
    const { operation: named } = this.options;
    let operation: string;
    if (typeof named === 'string') operation = named;
    else if (typeof named === 'function') operation = named(view.native, info);
    else if (view.route === undefined) {
      const response = this.problem(
        'internal',
        'the route pattern is unknown here: mount the idempotency middleware on the route, or give `operation`',
      );
      return { kind: 'answer', response };
    } else operation = `${method} ${route}`;
    return {
      kind: 'admitted',
      ticket: {
        key,
        tenant,
        operation,
        method,
        route,
        path: view.path,
        query: view.query,
        ...(view.traceparent ? { traceparent: view.traceparent } : {}),
      },
    };
  }

  /** Every check that needs no body: coverage, key, length, tenant, operation. */
  async admit(view: RequestView<Req>): Promise<Admission> {
    if (!this.covers(view.method)) return { kind: 'pass' };
    const key = this.readKey(view.keyFields);
    if (key.kind !== 'key') return key;
    const tooLarge = this.checkLength(view.contentLength);
    if (tooLarge) return { kind: 'answer', response: tooLarge };
    return this.scope(view, key.key);
  }

  /**
   * The request's fingerprint (see `requestFingerprint`) with this instance's `fingerprint`
   * options. Throws when the body cannot be fingerprinted.
   */
  fingerprint(request: Pick<Ticket, 'method' | 'route' | 'path' | 'query'>, body: unknown): string {
    const { exclude, includeQuery } = this.options;
    return requestFingerprint(
      { ...request, method: request.method.toUpperCase(), body },
      exclude,
      includeQuery,
    );
  }

  /**
   * Claims the key and runs `respond` (the handler) once per intent; stores the captured response
   * in the same transaction as the handler's writes (transaction mode) or after its steps (steps
   * mode); commits; and only then returns what to send.
   *
   * The fingerprint is taken over `body`, unless `options.fingerprint` was taken earlier (Fastify
   * takes it before schema validation can change the body).
   */
  execute(
    ticket: Ticket,
    body: unknown,
    respond: Respond<Client>,
    options: { fingerprint?: string } = {},
  ): Promise<Answer> {
    const { idem, mode } = this.options;
    let fingerprint: string;
    try {
      fingerprint = options.fingerprint ?? this.fingerprint(ticket, body);
    } catch (error) {
      return Promise.resolve({
        kind: 'problem',
        response: this.bodyMalformed(describe(error)),
        afterHandler: false,
      });
    }
    const spec: OperationSpec = {
      tenant: ticket.tenant,
      operation: ticket.operation,
      key: ticket.key,
      fingerprint,
      ...(this.options.waitMs !== undefined ? { waitMs: this.options.waitMs } : {}),
      ...(this.options.retention ? { retention: this.options.retention } : {}),
      ...(this.options.recording ? { recording: this.options.recording } : {}),
      readFirst: this.options.readFirst,
    };
    const state: RunState = { invoked: false, captured: undefined };
    // Promise callbacks, not an async function: one layer of promises fewer on every request (a
    // replay's cost is mostly such layers, see `observe` in observability/events.ts).
    const run = () =>
      continueTrace(ticket.traceparent, () =>
        mode === 'transaction'
          ? idem.run(spec, (tx, operation) =>
              this.runHandler(state, new TransactionContext(tx, operation), respond),
            )
          : idem.steps(spec, (op) => this.runHandler(state, new StepsContext(op), respond)),
      );
    return promised(run).then(
      (result): Answer => {
        if (!result.replayed) return { kind: 'handler', response: state.captured!, stored: true };
        try {
          const stored = restoreResponse(result.value, result.body);
          stored.headers.push([replayedHeader, 'true']);
          return { kind: 'replay', response: stored, afterHandler: state.invoked };
        } catch (error) {
          return this.failure(error, state); // a stored response it cannot read
        }
      },
      (error: unknown) => this.failure(error, state),
    );
  }

  private async runHandler(
    state: RunState,
    context: TransactionContext<Client> | StepsContext<Client>,
    respond: Respond<Client>,
  ): Promise<Outcome<StoredResponseMeta>> {
    if (state.invoked) throw new HandlerAlreadyRan();
    state.invoked = true;
    let captured: CapturedResponse;
    try {
      captured = await respond(context);
    } finally {
      context.close();
    }
    state.captured = captured;
    const decision = this.options.store(captured.status);
    if (decision === 'discard') {
      // Steps mode: a handler that answers 5xx after a step or call failed for a reason a retry
      // cannot change (a constraint, 22021, a downstream's 4xx) hands that error to the operation,
      // so the key is freed or stored as failed instead of left pending for retries that fail the
      // same way. Any other 5xx is rolled back and left for a retry to resume, as before.
      const failure = context.lastFailure;
      if (context instanceof StepsContext && failure !== undefined && !isRetryableStepFailure(failure)) {
        state.stepFailure = failure;
        throw failure;
      }
      // A generic 500 written by the framework for an error idem classifies as transient (a lost
      // connection, a full server, a read-only node after a failover): the client is told to
      // retry (503, Retry-After) rather than that the server failed.
      if (captured.status === 500 && failure !== undefined && isRetryable(failure)) {
        state.transientFailure = failure;
      }
      throw new DiscardResponse(captured.status);
    }
    const meta = storedMeta(
      captured.status,
      selectReplayHeaders(captured.headers, this.options.replayHeaders),
    );
    const resource = context.resource ?? this.options.resource(captured);
    const extras = resource ? { body: captured.body, resource } : { body: captured.body };
    return decision === 'completed' ? completed(meta, extras) : refused(meta, extras);
  }

  private failure(error: unknown, state: RunState): Answer {
    const cause = isOperationFailed(error) ? error.cause : undefined;
    // A lost lease is answered as `fenced` below, whatever the handler answered.
    const stepFailed =
      state.stepFailure !== undefined &&
      !isFenced(error) &&
      (error === state.stepFailure || cause === state.stepFailure);
    const answer = (kind: ProblemKind, detail: string, extras?: ProblemExtras): Answer => ({
      kind: 'problem',
      response: this.problem(kind, detail, extras),
      afterHandler: state.invoked,
    });
    if (isDiscard(cause) && state.transientFailure !== undefined && !isFenced(error)) {
      // Answered 503 and reported like any other: during a failover every request gets here, so
      // it reaches stderr only when nobody listens.
      this.reportError('handler', state.transientFailure);
      return answer('unavailable', 'the database is unavailable; nothing was lost: retry with the same key', {
        retryAfterSeconds: 1,
      });
    }
    if ((isDiscard(cause) || stepFailed) && state.captured) {
      // Nothing was stored (or the key was freed): the handler's own answer goes out as it is.
      return { kind: 'handler', response: state.captured, stored: false };
    }
    if (isKeyReused(error)) {
      return answer('key-reused', 'this idempotency key was first used with a different request');
    }
    if (isInProgress(error)) {
      const retryAfterSeconds = Math.max(1, Math.ceil(error.retryAfterMs / 1000));
      return answer('in-progress', 'a request with this idempotency key is still running; retry later', {
        retryAfterSeconds,
      });
    }
    if (isExpired(error)) {
      const expired = error;
      return answer(
        'result-expired',
        'this idempotency key was used and its request completed, but the stored response has expired; it will not run again',
        { resource: expired.resource, completedAt: expired.completedAt },
      );
    }
    if (isFenced(error)) {
      return answer('fenced', 'a retry of this request took it over; its answer is the one that counts', {
        retryAfterSeconds: 1,
      });
    }
    if (isInvalidKey(error)) return answer('key-malformed', (error as Error).message);
    if (isStepFailed(error)) {
      if (!error.replayed) this.reportError('handler', error);
      return answer(
        'step-failed',
        'this request failed for good after part of it had taken effect; it is stored as failed and will not run again with this key',
      );
    }
    if (state.captured) {
      this.reportError('commit', error);
      return answer(
        'commit-failed',
        'the request ran but its commit failed, so nothing was stored; retry with the same key',
        { retryAfterSeconds: 1 },
      );
    }
    // Transient (a lost connection, a timeout, a full or read-only server) or an unknown COMMIT
    // outcome: whatever committed is recorded under the key, so the retry resumes or replays.
    if (isRetryable(error)) {
      this.reportError('store', error);
      return answer('unavailable', 'the idempotency store is unavailable; retry with the same key', {
        retryAfterSeconds: 1,
      });
    }
    this.reportError('execute', error);
    return answer('internal', 'the request could not be processed; nothing was stored (see the server log)');
  }

  /** Builds a problem response with this instance's type base. */
  problem(kind: ProblemKind, detail: string, extras?: ProblemExtras): CapturedResponse {
    return problemResponse(kind, detail, this.options.problemTypeBase, extras);
  }
}

/** Whether the answer replaces a response the handler already produced (and that was captured). */
export function replacesHandlerResponse(answer: Answer): boolean {
  return answer.kind !== 'handler' && answer.afterHandler;
}

function isDiscard(error: unknown): boolean {
  return (
    typeof error === 'object' && error !== null && (error as Record<symbol, unknown>)[discardBrand] === true
  );
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * The framework-neutral engine, for integrating a framework idem has no subpath for: the
 * integrations (`idem/express`, `idem/fastify`, `idem/hono`, `idem/node-http`) are thin layers
 * over it.
 *
 * @example
 * const engine = createHttpIdempotency({ idem, tenant: (req) => req.user.account });
 * const admission = await engine.admit(view);
 */
export function createHttpIdempotency<Req, Client = unknown>(
  options: IdempotencyOptions<Req, Client>,
): HttpIdempotency<Req, Client> {
  return new HttpIdempotency<Req, Client>(options);
}
