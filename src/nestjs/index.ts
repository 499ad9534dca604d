/**
 * idem/nestjs: the Idempotency-Key contract for NestJS (10, 11 and 12), on
 * @nestjs/platform-express and @nestjs/platform-fastify. See docs/guide/nestjs.md.
 *
 * @example
 * @Module({ imports: [IdemModule.forRoot({ idem, tenant: (req) => req.headers['x-tenant'] })] })
 * class AppModule {}
 *
 * @Controller('orders')
 * class OrdersController {
 *   @Post()
 *   @Idempotent()
 *   create(@Body() body: CreateOrder, @IdemTransaction() tx: Transaction) { … }
 * }
 */
export { IdemModule, type IdemModuleAsyncOptions } from './module.js';
export { Idempotent } from './idempotent.js';
export { IdemContext, IdemTransaction } from './parameters.js';
export { IdempotencyInterceptor } from './interceptor.js';
export { IdempotencyBodyFilter } from './body-refusal-filter.js';
export {
  TransactionalAdapterIdem,
  type IdemTransactionOptions,
  type IdemTransactionalAdapterOptions,
  type TransactionalAdapterIdemOptions,
} from './transactional.js';
export {
  IDEM_MODULE_OPTIONS,
  type IdemModuleOptions,
  type IdempotentOptions,
  type NestHttpRequest,
  type TransactionHostLike,
} from './options.js';
export type { IdempotencyContext } from '../http/context.js';
