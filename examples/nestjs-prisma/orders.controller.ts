// examples/nestjs-prisma/orders.controller.ts
// A repository written against @nestjs-cls/transactional's TransactionHost, as with any of its
// adapters, and a controller whose routes follow the Idempotency-Key contract.
import {
  BadRequestException,
  Body,
  Controller,
  HttpException,
  Inject,
  Injectable,
  Post,
  type PipeTransform,
} from '@nestjs/common';
import { TransactionHost } from '@nestjs-cls/transactional';
import type { Transaction } from 'idem';
import {
  IdemContext,
  IdemTransaction,
  Idempotent,
  type IdempotencyContext,
  type TransactionalAdapterIdem,
} from 'idem/nestjs';
import type { Prisma } from '../prisma/generated/index.js';
import type { PrismaService } from './prisma.service.js';

type IdemPrisma = TransactionalAdapterIdem<PrismaService, Prisma.TransactionClient>;

export interface CreateOrder {
  amount: number;
  note?: string;
}

/**
 * Validation belongs in a pipe: pipes run before the method, so a request they refuse gets its 400
 * without anything stored, and the corrected request may reuse its key.
 */
@Injectable()
export class PositiveAmount implements PipeTransform<CreateOrder, CreateOrder> {
  transform(body: CreateOrder) {
    if (!(typeof body?.amount === 'number' && body.amount > 0)) {
      throw new BadRequestException('amount must be a positive number');
    }
    return body;
  }
}

@Injectable()
export class OrdersRepository {
  constructor(@Inject(TransactionHost) private readonly txHost: TransactionHost<IdemPrisma>) {}

  /** Inside an @Idempotent() route, `txHost.tx` is the transaction the key was claimed in. */
  create(tenant: string, order: CreateOrder) {
    return this.txHost.tx.order.create({ data: { tenant, amount: order.amount, note: order.note ?? null } });
  }
}

@Controller('orders')
export class OrdersController {
  constructor(@Inject(OrdersRepository) private readonly orders: OrdersRepository) {}

  /** The order row, the key and the stored 201 commit together; a retry gets the same bytes. */
  @Post()
  @Idempotent()
  async create(@Body(PositiveAmount) body: CreateOrder, @IdemContext() idem: IdempotencyContext) {
    const order = await this.orders.create(idem.tenant, body);
    if (order.amount > 10_000) {
      // A business refusal answered by Nest's exception filter: stored and replayed like a success.
      throw new HttpException({ error: 'over_limit', orderId: order.id }, 402);
    }
    return order;
  }

  /** The same, with idem's transaction as a parameter: `tx.client` is Prisma's transaction client. */
  @Post('direct')
  @Idempotent()
  async createDirect(
    @Body(PositiveAmount) body: CreateOrder,
    @IdemTransaction() tx: Transaction<Prisma.TransactionClient>,
  ) {
    return tx.client.order.create({ data: { tenant: 'acme', amount: body.amount, note: body.note ?? null } });
  }
}
