import { Module } from '@nestjs/common';
import { createIdem } from 'idem';
import { IdemModule } from 'idem/nestjs';
import { fromPg } from 'idem/pg';
import { Database } from './database';
import { OrdersController } from './orders.controller';

@Module({
  providers: [Database],
  exports: [Database],
})
export class DatabaseModule {}

@Module({
  imports: [
    DatabaseModule,
    IdemModule.forRootAsync({
      imports: [DatabaseModule],
      inject: [Database],
      useFactory: (db: Database) => ({
        idem: createIdem({ sql: fromPg(db.pool), schema: db.schema }),
        tenant: (req) => (req.headers['x-tenant'] as string | undefined) ?? 'acme',
      }),
    }),
  ],
  controllers: [OrdersController],
})
export class AppModule {}
