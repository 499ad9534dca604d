import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import type { IdempotencyContext } from '../http/context.js';
import { rawRequestOf } from './platform.js';
import { requestContext } from './request-state.js';

function contextOf(execution: ExecutionContext): IdempotencyContext | undefined {
  return requestContext(rawRequestOf(execution.switchToHttp().getRequest<unknown>()));
}

/**
 * The request's idempotency context (`IdempotencyContext`): its key, tenant and operation,
 * `tx` in transaction mode, `step(name, fn)` in steps mode, `deriveKey(name)` for downstream calls
 * and `setResource(pointer)`. `undefined` on a request without a key when the key is optional.
 */
export const IdemContext = createParamDecorator((_data: unknown, execution: ExecutionContext) =>
  contextOf(execution),
);

/**
 * The transaction the request's key was claimed in (transaction mode): write business rows with
 * `tx.query(...)` or through your ORM's transaction object, `tx.client` (a Prisma transaction
 * client, a TypeORM `EntityManager`, a Knex transaction…), and they commit with the key and the
 * stored response. `undefined` on a request without a key when the key is optional.
 */
export const IdemTransaction = createParamDecorator(
  (_data: unknown, execution: ExecutionContext) => contextOf(execution)?.tx,
);
