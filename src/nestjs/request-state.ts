/**
 * Per-request state shared by the interceptor, the decorators and the parameter decorators.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { IncomingMessage } from 'node:http';
import type { IdempotencyContext } from '../http/context.js';

/** The idempotency context of each request that runs under a claimed key, by raw Node request. */
const contexts = new WeakMap<IncomingMessage, IdempotencyContext>();

export function setRequestContext(request: IncomingMessage, context: IdempotencyContext): void {
  contexts.set(request, context);
}

export function requestContext(request: IncomingMessage): IdempotencyContext | undefined {
  return contexts.get(request);
}

/**
 * Whether the controller method itself ran for the current request. Nest runs pipes (validation,
 * parsing of `@Param()`/`@Body()`) after the interceptors, inside the claimed key's transaction;
 * a request they refuse never reached the method, so its 400 is not a business answer to store.
 */
export const handlerCall = new AsyncLocalStorage<{ invoked: boolean }>();
