/**
 * The interceptor behind `@Idempotent()`. It is a thin translation to the framework-neutral
 * engine (`HttpIdempotency`, src/http/engine.ts), like the Express and Fastify integrations.
 *
 * Nest sends a route's answer after the interceptors, and an exception filter's answer after
 * that, so what the client gets is captured where both end up: the raw Node response (Express's
 * `res`, Fastify's `reply.raw`), held back the way idem/express holds it. The handler runs inside
 * the claimed key's transaction; its answer, or the filter's, is captured, stored with its writes,
 * committed, and only then sent. Answers the engine gives without the handler (a replay, 409, 422,
 * a 400 for the key) replace whatever Nest writes for the request.
 */
import type { ServerResponse } from 'node:http';
import type { CallHandler, ExecutionContext, NestInterceptor } from '@nestjs/common';
import { Inject, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { from, lastValueFrom, mergeAll, of, throwError, type Observable } from 'rxjs';
import { InvalidArgumentError } from '../core/errors.js';
import type { Transaction } from '../core/sql.js';
import type { IdempotencyContext } from '../http/context.js';
import { HttpIdempotency, type Answer } from '../http/engine.js';
import { captureNodeResponse, type NodeResponseCapture } from '../http/node-response-capture.js';
import { defaultStore, type CapturedResponse, type StoreDecision } from '../http/options.js';
import {
  IDEM_MODULE_OPTIONS,
  IDEMPOTENT_ROUTE,
  type IdemModuleOptions,
  type IdempotentOptions,
} from './options.js';
import { rawRequestOf, rawResponseOf, requestBody, requestView } from './platform.js';
import { handlerCall, setRequestContext } from './request-state.js';
import { joinIdemTransaction } from './transactional.js';

/** An `@Idempotent()` route is covered whatever its method: the decorator is the opt-in. */
const everyMethod = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];

type HandlerOutcome = { value: unknown } | { error: unknown };

export class IdempotencyInterceptor implements NestInterceptor {
  private readonly base: HttpIdempotency<unknown>;
  /** One engine per decorated handler, with the route's overrides applied. */
  private readonly engines = new WeakMap<object, HttpIdempotency<unknown>>();

  constructor(
    private readonly options: IdemModuleOptions<unknown>,
    private readonly reflector: Reflector,
  ) {
    this.base = new HttpIdempotency<unknown>({ ...options, methods: everyMethod }, 'nestjs');
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const engine = context.getType() === 'http' ? this.engineFor(context.getHandler()) : undefined;
    if (!engine) return next.handle();
    const http = context.switchToHttp();
    return from(this.handle(engine, http.getRequest<unknown>(), http.getResponse<unknown>(), next)).pipe(
      mergeAll(),
    );
  }

  private engineFor(handler: object): HttpIdempotency<unknown> | undefined {
    let engine = this.engines.get(handler);
    if (!engine) {
      const overrides = this.reflector.get<IdempotentOptions<unknown> | undefined>(
        IDEMPOTENT_ROUTE,
        handler as never,
      );
      if (!overrides) return undefined;
      const store = overrides.store ?? this.options.store ?? defaultStore;
      engine = this.base.with({ ...overrides, store: unlessRefusedBeforeTheHandler(store) });
      this.engines.set(handler, engine);
    }
    return engine;
  }

  private async handle(
    engine: HttpIdempotency<unknown>,
    request: unknown,
    response: unknown,
    next: CallHandler,
  ): Promise<Observable<unknown>> {
    const admission = await engine.admit(requestView(request, engine.options.keyHeader));
    if (admission.kind === 'pass') return next.handle();
    const capture = captureNodeResponse(rawResponseOf(response));
    try {
      if (admission.kind === 'answer') return answerInstead(capture, admission.response);
      const read = await requestBody(request, engine);
      if ('problem' in read) return answerInstead(capture, read.problem);

      let started!: () => void;
      const handlerStarted = new Promise<null>((resolve) => (started = () => resolve(null)));
      let settled!: (outcome: HandlerOutcome) => void;
      const handled = new Promise<HandlerOutcome>((resolve) => (settled = resolve));
      const answer = handlerCall.run({ invoked: false }, () =>
        engine.execute(admission.ticket, read.body, (context) => {
          const visible = this.withHost(context);
          setRequestContext(rawRequestOf(request), visible);
          started();
          // Subscribed here, so the handler runs in this async context: inside idem's transaction,
          // and inside the TransactionHost's when there is one.
          const run = () => lastValueFrom(next.handle(), { defaultValue: undefined });
          const running =
            this.options.transactionHost && visible.mode === 'transaction'
              ? this.inHost(visible.tx, run)
              : run();
          running.then(
            (value) => settled({ value }),
            (error: unknown) => settled({ error }),
          );
          return untilSentOrAbandoned(capture, rawResponseOf(response), handled);
        }),
      );
      const first = await Promise.race([handlerStarted, answer]);
      if (first !== null) return answerInstead(capture, first.response); // the handler did not run
      answer.then(
        (final) => settle(capture, final),
        (error: unknown) => this.fail(capture, error),
      );
      const outcome = await handled;
      return 'error' in outcome ? throwError(() => outcome.error) : of(outcome.value);
    } catch (error) {
      // Let Nest's exception filters answer; their response goes out as they made it.
      void capture.done.then(() => capture.release());
      throw error;
    }
  }

  /**
   * Runs the handler with idem's transaction as the TransactionHost's active one, so repositories
   * that use `txHost.tx` write in it. REQUIRES_NEW makes the host call the adapter, which joins
   * the given transaction instead of opening one.
   */
  private inHost<T>(tx: Transaction, run: () => Promise<T>): Promise<T> {
    const host = this.options.transactionHost!;
    return host.withTransaction('REQUIRES_NEW', { [joinIdemTransaction]: tx }, async () => {
      if (host.tx !== tx.client) {
        throw new InvalidArgumentError(
          "IdemModule's transactionHost must be registered with TransactionalAdapterIdem (idem/nestjs): " +
            "another adapter opened a transaction apart from idem's",
        );
      }
      return run();
    }) as Promise<T>;
  }

  /** In steps mode with a TransactionHost, each step's transaction is the host's active one. */
  private withHost(context: IdempotencyContext): IdempotencyContext {
    const host = this.options.transactionHost;
    if (!host || context.mode !== 'steps') return context;
    const step: IdempotencyContext['step'] = (name, fn) =>
      context.step(name, (tx, info) => this.inHost(tx, () => fn(tx, info)));
    return new Proxy(context, {
      get(target, property) {
        if (property === 'step') return step;
        const value: unknown = Reflect.get(target, property, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
  }

  private fail(capture: NodeResponseCapture, error: unknown): void {
    // Only reached if the engine itself broke; the response may be half-made.
    this.base.reportError('intercept', error);
    capture.release();
  }
}

Injectable()(IdempotencyInterceptor);
Inject(IDEM_MODULE_OPTIONS)(IdempotencyInterceptor, undefined, 0);
Inject(Reflector)(IdempotencyInterceptor, undefined, 1);

/**
 * How long a response may stay unwritten once the handler has settled and the client is gone.
 * Nest sends nothing at all to a client that left while a method's Observable was running; without
 * a bound, the key's transaction would stay open. A write that is coming takes microseconds.
 */
const abandonAfterMs = 1000;

class ClientGoneError extends Error {
  constructor() {
    super(`the client left and Nest sent no response within ${abandonAfterMs} ms; nothing was stored`);
  }
}

/** The captured response, or a rejection (a rollback) once the client left and nothing will be written. */
function untilSentOrAbandoned(
  capture: NodeResponseCapture,
  response: ServerResponse,
  handled: Promise<unknown>,
): Promise<CapturedResponse> {
  let timer: NodeJS.Timeout | undefined;
  let onClose: (() => void) | undefined;
  const abandoned = new Promise<never>((_, reject) => {
    const start = () => {
      timer = setTimeout(() => reject(new ClientGoneError()), abandonAfterMs);
      timer.unref();
    };
    void handled.then(() => {
      if (response.destroyed) start();
      else response.once('close', (onClose = start));
    });
  });
  return Promise.race([capture.done, abandoned]).finally(() => {
    clearTimeout(timer);
    if (onClose) response.off('close', onClose);
  });
}

/** After the commit: the handler's response as it was made, or the engine's problem in its place. */
function settle(capture: NodeResponseCapture, answer: Answer): void {
  if (answer.kind === 'handler') capture.release();
  else capture.replace(answer.response);
}

/**
 * Answers without the handler. Nest still sends a response for the request (the interceptor's
 * `undefined`); it is captured and replaced.
 */
function answerInstead(capture: NodeResponseCapture, response: CapturedResponse): Observable<unknown> {
  void capture.done.then(() => capture.replace(response));
  return of(undefined);
}

/**
 * The route's store policy, except that a request refused by pipes is never stored: bad input is
 * refused before anything is stored (docs/principles.md, 11).
 */
function unlessRefusedBeforeTheHandler(store: (status: number) => StoreDecision) {
  return (status: number): StoreDecision =>
    handlerCall.getStore()?.invoked === false ? 'discard' : store(status);
}
