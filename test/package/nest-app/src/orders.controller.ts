import { Body, Controller, Post } from '@nestjs/common';
import type { Transaction } from 'idem';
import { Idempotent, IdemTransaction } from 'idem/nestjs';
import type { PoolClient } from 'pg';
import { Database } from './database';

/** A row type as Nest codebases write them: an interface, not a type literal. */
export interface Order {
  id: string;
  total: number;
  note: string | null;
}

export interface CreateOrder {
  total: number;
  note?: string;
}

@Controller('orders')
export class OrdersController {
  constructor(private readonly db: Database) {}

  /** The order row, the key and the stored 201 commit together; a retry gets the same bytes. */
  @Post()
  @Idempotent()
  async create(@Body() body: CreateOrder, @IdemTransaction() tx: Transaction<PoolClient>): Promise<Order> {
    const { rows } = await tx.query<Order>(
      `INSERT INTO "${this.db.schema}".orders (total, note) VALUES ($1, $2) RETURNING id::text, total, note`,
      [body.total, body.note ?? null],
    );
    return rows[0];
  }

  /** The same through node-postgres's own client in idem's transaction (`tx.client`). */
  @Post('direct')
  @Idempotent()
  async createDirect(
    @Body() body: CreateOrder,
    @IdemTransaction() tx: Transaction<PoolClient>,
  ): Promise<Order> {
    const { rows } = await tx.client.query<Order>(
      `INSERT INTO "${this.db.schema}".orders (total, note) VALUES ($1, $2) RETURNING id::text, total, note`,
      [body.total, body.note ?? null],
    );
    return rows[0];
  }
}
