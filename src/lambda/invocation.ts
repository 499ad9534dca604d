/**
 * One invocation made idempotent, whatever calls the handler (the function wrapper, or the Middy
 * middleware, which splits the call into `before`, `after` and `onError`):
 *
 * - an HTTP event goes through the Idempotency-Key engine of `idem/http`, unchanged: the same
 *   parsing of the key, the same fingerprint, the stored response (status, headers, body and here
 *   the base64 flag) replayed with `Idempotent-Replayed: true`, the same problem documents (422
 *   on another body, 409 while a duplicate holds the key), the handler's writes in the key's
 *   transaction;
 * - any other event runs as `idem.run`, keyed by what `key` selects, its result stored as JSON.
 *
 * A handler that throws rolls its writes back and its error is thrown on, as without idem (unless
 * a concurrent duplicate recorded the key meanwhile: its stored answer is returned).
 * Nothing here starts a timer, and no state outlives the invocation: waits are bounded by the
 * invocation's remaining time.
 */
import { fingerprint, isOperationFailed, type Idem, type OperationSpec } from '../index.js';
import {
  createHttpIdempotency,
  defaultReplayHeaders,
  defaultStore,
  isBodyMalformed,
  parseBody,
  type CapturedResponse,
  type HttpIdempotency,
  type IdempotencyContext,
  type RequestView,
  type RouteInfo,
} from '../http/index.js';
// The transaction-mode context of the HTTP integrations, so that a handler sees one `context.idem`
// whatever the event (`idem/http` exports its type only).
import { TransactionContext } from '../http/context.js';
import { boundsOf, boundTransactionBy } from './deadline.js';
import { KeyMissingError, TenantMissingError } from './errors.js';
import { defaultPayload, keyOf } from './event-key.js';
import { base64Marker, captureResult, readHttpEvent, resultOf, type HttpEvent } from './http-event.js';
import { lambdaSettings, type LambdaIdempotencyOptions, type LambdaSettings } from './options.js';
import type { LambdaContext, LambdaRequest } from './types.js';
import type { Queryable } from '../core/sql.js';

/** Runs the handler; `idem` is undefined when the invocation runs without idempotency. */
export type RunHandler<Client> = (idem: IdempotencyContext<Client> | undefined) => Promise<unknown>;

/**
 * The status of the response that stands for a handler that threw, or returned something API
 * Gateway would refuse: outside HTTP's range, so no store policy keeps it, whatever it says of
 * real statuses.
 */
const notAResponse = 0;
const placeholder: CapturedResponse = { status: notAResponse, headers: [], body: new Uint8Array(0) };

export class LambdaInvocations<Client, Event> {
  private readonly engine: HttpIdempotency<LambdaRequest<Event>, Client>;
  private readonly settings: LambdaSettings<Client, Event>;
  private readonly idem: Idem<Client>;
  /** The wait for a concurrent duplicate before the remaining time bounds it. */
  private readonly waitMs: number;

  constructor(private readonly options: LambdaIdempotencyOptions<Client, Event>) {
    this.settings = lambdaSettings(options);
    const store = options.store ?? defaultStore;
    this.engine = createHttpIdempotency<LambdaRequest<Event>, Client>({
      ...options,
      mode: 'transaction',
      required: this.settings.required,
      operation: (request, route) => this.operationOf(request, route),
      replayHeaders: [...(options.replayHeaders ?? defaultReplayHeaders), base64Marker],
      store: (status) => (status === notAResponse ? 'discard' : store(status)),
    });
    this.idem = options.idem;
    // The instance's own default (5000 ms unless `createIdem` says otherwise), read once.
    this.waitMs =
      options.waitMs ??
      (typeof this.idem.prepare === 'function'
        ? this.idem.prepare({ tenant: 'lambda', operation: 'lambda', key: 'lambda', fingerprint: '-' }).waitMs
        : 5000);
  }

  /** Runs one invocation: `run` calls the handler, at most once. */
  async invoke(event: Event, context: LambdaContext, run: RunHandler<Client>): Promise<unknown> {
    const request: LambdaRequest<Event> = { event, context };
    const http = readHttpEvent(event);
    return http ? this.http(request, http, run) : this.other(request, run);
  }

  private async http(
    request: LambdaRequest<Event>,
    http: HttpEvent,
    run: RunHandler<Client>,
  ): Promise<unknown> {
    const engine = this.boundedEngine(request.context);
    if (!engine.covers(http.method)) return run(undefined);
    const answer = (response: CapturedResponse) => resultOf(http, response);
    let key: string;
    if (this.settings.key) {
      let selected: unknown;
      try {
        selected = this.settings.key(request.event, request.context);
      } catch (error) {
        if (isBodyMalformed(error)) return answer(engine.bodyMalformed(error.message));
        throw error;
      }
      const found = keyOf(selected);
      if (found === undefined) {
        if (!this.settings.required) return run(undefined);
        return answer(
          engine.problem('key-missing', 'the request has no idempotency key where `key` says it is'),
        );
      }
      key = found;
    } else {
      const read = engine.readKey(http.fields(engine.options.keyHeader));
      if (read.kind === 'pass') return run(undefined);
      if (read.kind === 'answer') return answer(read.response);
      key = read.key;
    }
    const parsed = 'parsed' in http.body;
    if (!parsed) {
      const tooLarge = engine.checkLength((http.body as Uint8Array).byteLength);
      if (tooLarge) return answer(tooLarge);
    }
    const view: RequestView<LambdaRequest<Event>> = {
      native: request,
      method: http.method,
      route: http.route,
      path: http.path,
      query: http.query,
      keyFields: [],
      contentLength: undefined,
      traceparent: http.fields('traceparent')[0],
    };
    const scoped = await engine.scope(view, key);
    if (scoped.kind === 'answer') return answer(scoped.response);
    let body: unknown;
    try {
      body = parsed
        ? (http.body as { parsed: unknown }).parsed
        : parseBody(http.body as Uint8Array, http.fields('content-type')[0]);
    } catch (error) {
      if (isBodyMalformed(error)) return answer(engine.bodyMalformed(error.message));
      throw error;
    }
    let fingerprintOption: { fingerprint?: string } = {};
    if (this.settings.payload) {
      try {
        fingerprintOption = {
          fingerprint: fingerprint(this.settings.payload(request.event, request.context)),
        };
      } catch (error) {
        if (isBodyMalformed(error)) return answer(engine.bodyMalformed(error.message));
        throw error;
      }
    }

    const state: { threw?: { error: unknown }; raw?: unknown; unconvertible?: boolean } = {};
    const outcome = await engine.execute(
      scoped.ticket,
      body,
      async (context) => {
        try {
          await this.bound(context.tx, request.context);
          state.raw = await run(context);
        } catch (error) {
          state.threw = { error };
          return placeholder;
        }
        const captured = captureResult(http.format, state.raw);
        if (captured) return captured;
        state.unconvertible = true;
        return placeholder;
      },
      fingerprintOption,
    );
    if (outcome.kind === 'replay') return this.replayed(answer(outcome.response), request);
    if (outcome.kind === 'handler') {
      if (state.threw) throw state.threw.error;
      if (state.unconvertible) return state.raw;
    }
    return answer(outcome.response);
  }

  private async other(request: LambdaRequest<Event>, run: RunHandler<Client>): Promise<unknown> {
    const { event, context } = request;
    if (!this.settings.key) {
      if (!this.settings.required) return run(undefined);
      throw new KeyMissingError(
        'this event is not an HTTP event (API Gateway, ALB, a function URL), so it has no Idempotency-Key ' +
          'header: give `key`, the path or function that finds its key (Powertools: eventKeyJmesPath)',
      );
    }
    const key = keyOf(this.settings.key(event, context));
    if (key === undefined) {
      if (!this.settings.required) return run(undefined);
      throw new KeyMissingError('the event has no idempotency key where `key` says it is');
    }
    const tenant = await this.engine.options.tenant(request);
    if (typeof tenant !== 'string' || tenant === '') {
      throw new TenantMissingError('the tenant resolver named no tenant for this event');
    }
    const payload = this.settings.payload ? this.settings.payload(event, context) : defaultPayload(event);
    const { retention, recording, readFirst } = this.options;
    const spec: OperationSpec = {
      tenant,
      operation: this.operationOf(request, undefined),
      key,
      request: payload ?? null,
      waitMs: this.boundedWait(context),
      ...(retention ? { retention } : {}),
      ...(recording ? { recording } : {}),
      ...(readFirst !== undefined ? { readFirst } : {}),
    };
    let threw: { error: unknown } | undefined;
    try {
      const result = await this.idem.run(spec, async (tx, operation) => {
        const idem = new TransactionContext<Client>(tx, operation);
        try {
          await this.bound(tx, context);
          return await run(idem);
        } catch (error) {
          threw = { error };
          throw error;
        } finally {
          idem.close();
        }
      });
      return result.replayed ? this.replayed(result.value, request) : result.value;
    } catch (error) {
      // The handler's own error, as without idem (idem wraps it in OperationFailedError).
      if (threw && isOperationFailed(error) && error.cause === threw.error) throw threw.error;
      throw error;
    }
  }

  /** `boundByDeadline`: the transaction's statements and idle time end by the deadline. */
  private async bound(tx: Queryable, context: LambdaContext | undefined): Promise<void> {
    if (!this.settings.boundByDeadline) return;
    const bounds = boundsOf(context, this.settings.reserveMs);
    if (bounds) await boundTransactionBy(tx, bounds);
  }

  private async replayed(result: unknown, request: LambdaRequest<Event>): Promise<unknown> {
    return this.settings.mapReplay ? this.settings.mapReplay(result, request) : result;
  }

  private operationOf(request: LambdaRequest<Event>, route: RouteInfo | undefined): string {
    const { operation } = this.settings;
    if (typeof operation === 'string') return operation;
    if (typeof operation === 'function') return operation(request, route);
    if (route?.route) return `${route.method} ${route.route}`;
    const name = request.context?.functionName || process.env.AWS_LAMBDA_FUNCTION_NAME || '';
    return route ? `${route.method} ${name}` : name;
  }

  /**
   * The wait for a concurrent duplicate: the configured one, cut to what the invocation has left
   * minus `reserveMs`, so that the answer (409, `InProgressError`) goes out before the deadline.
   */
  private boundedWait(context: LambdaContext | undefined): number {
    const remaining =
      typeof context?.getRemainingTimeInMillis === 'function' ? context.getRemainingTimeInMillis() : NaN;
    if (!Number.isFinite(remaining)) return this.waitMs;
    return Math.max(0, Math.min(this.waitMs, Math.floor(remaining - this.settings.reserveMs)));
  }

  private boundedEngine(context: LambdaContext | undefined): HttpIdempotency<LambdaRequest<Event>, Client> {
    const waitMs = this.boundedWait(context);
    return waitMs === this.waitMs ? this.engine : this.engine.with({ waitMs });
  }
}
