import { Injectable, OnModuleDestroy } from '@nestjs/common';
import { Pool } from 'pg';

/** The app's node-postgres pool, and the schema of its tables and of idem's. */
@Injectable()
export class Database implements OnModuleDestroy {
  readonly pool = new Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
  readonly schema = process.env.APP_SCHEMA ?? 'public';

  async onModuleDestroy() {
    await this.pool.end();
  }
}
