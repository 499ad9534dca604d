import type { IncomingHttpHeaders } from 'node:http';
import type { IdempotencyOptions } from '../http/options.js';

/** Injection token of the options given to `IdemModule.forRoot` / `forRootAsync`. */
export const IDEM_MODULE_OPTIONS = Symbol.for('idem.nestjs.module-options');

/** Metadata key of `@Idempotent()`: the route's overrides. */
export const IDEMPOTENT_ROUTE = 'idem:idempotent';

/**
 * What the option callbacks (`tenant`, `operation`) receive: the platform's own request, an
 * Express `Request` on @nestjs/platform-express and a `FastifyRequest` on
 * @nestjs/platform-fastify. Name yours as the type argument: `IdemModule.forRoot<Request>(…)`.
 */
export interface NestHttpRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body?: unknown;
}

/**
 * The part of @nestjs-cls/transactional's `TransactionHost` idem uses. Register the plugin with
 * `TransactionalAdapterIdem` (idem/nestjs) and pass the host as `transactionHost`.
 */
export interface TransactionHostLike {
  readonly tx: unknown;
  withTransaction(propagation: string, options: object, fn: () => Promise<unknown>): Promise<unknown>;
}

/**
 * Options of `IdemModule`: the HTTP contract's options (docs/guide/http.md: `idem`, `tenant`,
 * `maxBodyBytes`, `waitMs`, `mode`, …), for every `@Idempotent()` route, which may override them.
 */
export type IdemModuleOptions<Req = NestHttpRequest, Client = unknown> = Omit<
  IdempotencyOptions<Req, Client>,
  'methods'
> & {
  /**
   * The methods whose requests `IdempotencyBodyFilter` answers with problem documents when Nest's
   * body parser refuses them. Default `['POST', 'PATCH']`. An `@Idempotent()` route is covered
   * whatever its method: the decorator is the opt-in.
   */
  methods?: readonly string[];
  /**
   * The `TransactionHost` of @nestjs-cls/transactional, registered with `TransactionalAdapterIdem`.
   * When set, a transaction-mode handler runs inside idem's transaction as the host's active
   * transaction, so repositories that write through `txHost.tx` (and `@Transactional()` methods,
   * which join it) commit with the key and the stored response. Default: none.
   */
  transactionHost?: TransactionHostLike;
};

/** Per-route overrides for `@Idempotent(options)`. */
export type IdempotentOptions<Req = NestHttpRequest> = Partial<
  Omit<IdempotencyOptions<Req>, 'idem' | 'methods' | 'events'>
>;
