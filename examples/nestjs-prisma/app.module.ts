// examples/nestjs-prisma/app.module.ts
// Prisma, @nestjs-cls/transactional with idem's adapter, and IdemModule, wired once.
import { Module, type DynamicModule } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { ClsPluginTransactional, TransactionHost } from '@nestjs-cls/transactional';
import { ClsModule } from 'nestjs-cls';
import { createIdem } from 'idem';
import { IdemModule, IdempotencyBodyFilter, TransactionalAdapterIdem } from 'idem/nestjs';
import { fromPrisma } from 'idem/prisma';
import { OrdersController, OrdersRepository } from './orders.controller.js';
import { DATABASE, PrismaService, type DatabaseConfig } from './prisma.service.js';

@Module({})
export class AppModule {
  static forRoot(database: DatabaseConfig): DynamicModule {
    @Module({
      providers: [{ provide: DATABASE, useValue: database }, PrismaService],
      exports: [PrismaService],
    })
    class PrismaModule {}

    return {
      module: AppModule,
      imports: [
        PrismaModule,
        ClsModule.forRoot({
          global: true,
          middleware: { mount: true },
          plugins: [
            new ClsPluginTransactional({
              imports: [PrismaModule],
              adapter: new TransactionalAdapterIdem({
                connectionToken: PrismaService,
                sql: (prisma: PrismaService) => fromPrisma(prisma),
              }),
            }),
          ],
        }),
        IdemModule.forRootAsync({
          imports: [PrismaModule],
          inject: [PrismaService, TransactionHost],
          useFactory: (prisma: PrismaService, txHost: TransactionHost) => ({
            idem: createIdem({ sql: fromPrisma(prisma), schema: database.schema }),
            // Usually the authenticated account, e.g. (req) => req.user.accountId.
            tenant: (req) => req.headers['x-tenant'] as string | undefined,
            transactionHost: txHost,
          }),
        }),
      ],
      controllers: [OrdersController],
      providers: [OrdersRepository, { provide: APP_FILTER, useExisting: IdempotencyBodyFilter }],
    };
  }
}
