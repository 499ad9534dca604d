import {
  Module,
  type DynamicModule,
  type InjectionToken,
  type ModuleMetadata,
  type OptionalFactoryDependency,
  type Provider,
} from '@nestjs/common';
import { Idem } from '../operations/idem.js';
import { IdempotencyBodyFilter } from './body-refusal-filter.js';
import { IdempotencyInterceptor } from './interceptor.js';
import { IDEM_MODULE_OPTIONS, type IdemModuleOptions, type NestHttpRequest } from './options.js';

/** `IdemModule.forRootAsync` options, in Nest's usual shape. */
export interface IdemModuleAsyncOptions<Req = NestHttpRequest, Client = unknown> extends Pick<
  ModuleMetadata,
  'imports'
> {
  /** Builds the options, e.g. from your `PrismaService` and `ConfigService`. */
  useFactory: (...args: never[]) => IdemModuleOptions<Req, Client> | Promise<IdemModuleOptions<Req, Client>>;
  /** Providers handed to `useFactory`, in order. */
  inject?: (InjectionToken | OptionalFactoryDependency)[];
}

/**
 * The idempotency module: register it once, in the root module (it is global), then put
 * `@Idempotent()` on controller methods. It provides the options, the `Idem` instance (inject it
 * as `Idem` to run keyed operations outside HTTP), the interceptor and `IdempotencyBodyFilter`.
 *
 * @example
 * IdemModule.forRoot({ idem: createIdem({ sql: fromPg(pool) }), tenant: (req) => req.headers['x-tenant'] })
 * IdemModule.forRootAsync({
 *   imports: [PrismaModule],
 *   inject: [PrismaService],
 *   useFactory: (prisma: PrismaService) => ({ idem: createIdem({ sql: fromPrisma(prisma) }), tenant: … }),
 * })
 */
export class IdemModule {
  static forRoot<Req = NestHttpRequest, Client = unknown>(
    options: IdemModuleOptions<Req, Client>,
  ): DynamicModule {
    return IdemModule.with([{ provide: IDEM_MODULE_OPTIONS, useValue: options }], []);
  }

  static forRootAsync<Req = NestHttpRequest, Client = unknown>(
    options: IdemModuleAsyncOptions<Req, Client>,
  ): DynamicModule {
    return IdemModule.with(
      [
        {
          provide: IDEM_MODULE_OPTIONS,
          useFactory: options.useFactory as (...args: unknown[]) => unknown,
          inject: options.inject ?? [],
        },
      ],
      options.imports ?? [],
    );
  }

  private static with(options: Provider[], imports: NonNullable<ModuleMetadata['imports']>): DynamicModule {
    return {
      module: IdemModule,
      global: true,
      imports,
      providers: [
        ...options,
        { provide: Idem, useFactory: (o: IdemModuleOptions) => o.idem, inject: [IDEM_MODULE_OPTIONS] },
        IdempotencyInterceptor,
        IdempotencyBodyFilter,
      ],
      exports: [IDEM_MODULE_OPTIONS, Idem, IdempotencyInterceptor, IdempotencyBodyFilter],
    };
  }
}

Module({})(IdemModule);
