// examples/nestjs-prisma/prisma.service.ts
// The usual PrismaService: a PrismaClient on @prisma/adapter-pg, closed with the app.
import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from '../prisma/generated/index.js';

export const DATABASE = Symbol('database');
export interface DatabaseConfig {
  url: string;
  /** The schema of the business tables and of idem's (default `public`). */
  schema: string;
}

@Injectable()
export class PrismaService extends PrismaClient implements OnModuleDestroy {
  constructor(@Inject(DATABASE) database: DatabaseConfig) {
    super({ adapter: new PrismaPg({ connectionString: database.url }, { schema: database.schema }) });
  }
  async onModuleDestroy() {
    await this.$disconnect();
  }
}
