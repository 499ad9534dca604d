import { SetMetadata, UseInterceptors } from '@nestjs/common';
import { InvalidArgumentError } from '../core/errors.js';
import { IdempotencyInterceptor } from './interceptor.js';
import { IDEMPOTENT_ROUTE, type IdempotentOptions, type NestHttpRequest } from './options.js';
import { handlerCall } from './request-state.js';

/**
 * Puts a controller method under the Idempotency-Key contract (docs/guide/http.md), with `IdemModule`'s
 * options and the overrides given here: a retried request with the same key has one business
 * effect, and the client gets the first answer back, byte for byte, with `Idempotent-Replayed:
 * true`. Answers made by exception filters are captured and stored like the method's own.
 *
 * @example
 * @Post('orders')
 * @Idempotent()
 * create(@Body() body: CreateOrder, @IdemTransaction() tx: Transaction<Prisma.TransactionClient>) {
 *   return tx.client.order.create({ data: body });
 * }
 *
 * @Post('checkout')
 * @Idempotent({ mode: 'steps', waitMs: 300 })
 * checkout(@IdemContext() idem: IdempotencyContext) { ... idem.step('charge', ...) ... }
 */
export function Idempotent<Req = NestHttpRequest>(options: IdempotentOptions<Req> = {}): MethodDecorator {
  return (target, key, descriptor) => {
    const method = descriptor.value as unknown;
    if (typeof method !== 'function')
      throw new InvalidArgumentError('@Idempotent() goes on a controller method');
    // Marks that the method itself ran, so that a request refused by pipes before it (validation)
    // is not stored: its key stays free for the corrected request.
    const marked = function (this: unknown, ...args: unknown[]): unknown {
      const call = handlerCall.getStore();
      if (call) call.invoked = true;
      return (method as (...a: unknown[]) => unknown).apply(this, args);
    };
    Object.defineProperty(marked, 'name', { value: method.name });
    // Keep what decorators below this one recorded on the method (route, status, guards…).
    for (const metadataKey of Reflect.getMetadataKeys(method)) {
      Reflect.defineMetadata(metadataKey, Reflect.getMetadata(metadataKey, method), marked);
    }
    descriptor.value = marked as typeof descriptor.value;
    SetMetadata(IDEMPOTENT_ROUTE, options)(target, key, descriptor);
    UseInterceptors(IdempotencyInterceptor)(target, key, descriptor);
    return descriptor;
  };
}
