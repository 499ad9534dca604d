/**
 * NestJS beyond the contract suite (which runs on Nest in test/http/contract.test.ts): Nest +
 * Prisma end to end, `IdemModule.forRootAsync`, `@IdemTransaction()`, answers made by exception
 * filters, pipes that refuse a request, and @nestjs-cls/transactional repositories writing in
 * idem's transaction. On @nestjs/platform-express and @nestjs/platform-fastify, a real PostgreSQL
 * and real HTTP.
 */
import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  BadRequestException,
  Body,
  Catch,
  Controller,
  HttpException,
  Inject,
  Injectable,
  Module,
  Post,
  UseFilters,
  UsePipes,
  type ArgumentsHost,
  type ExceptionFilter,
  type INestApplication,
  type PipeTransform,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { ClsPluginTransactional, Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { ClsModule } from 'nestjs-cls';
import { map, timer } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countRows } from '../support/database.js';
import { fromPrisma } from 'idem/prisma';
import { createEvents, createIdem, type IdemErrorEvent, type Transaction } from 'idem';
// The class itself, the token IdemModule provides the instance under ('idem' exports it as a type).
import { Idem } from '../../src/operations/idem.js';
import type { IdempotencyContext } from 'idem/http';
import { IdemContext, IdemModule, Idempotent, IdemTransaction, TransactionalAdapterIdem } from 'idem/nestjs';
import { prepareAdapter } from '../support/adapters.js';
import { client, type Send } from '../support/http/client.js';
import { prismaFactory, type OrmAdapterUnderTest } from '../support/orm-adapters.js';
import type { Prisma, PrismaClient } from '../support/prisma/generated/index.js';

const PRISMA = Symbol('PrismaClient');
type PrismaAdapter = TransactionalAdapterIdem<PrismaClient, Prisma.TransactionClient>;

/** A repository written against the TransactionHost, as with any @nestjs-cls/transactional adapter. */
@Injectable()
class EffectsRepository {
  constructor(@Inject(TransactionHost) private readonly txHost: TransactionHost<PrismaAdapter>) {}

  async add(intent: string, payload: Prisma.InputJsonValue | null = null): Promise<number> {
    const row = await this.txHost.tx.effect.create({
      data: { tenant: 'acme', intent, payload: payload ?? undefined },
    });
    return row.id;
  }

  /** A service method that is transactional on its own: inside an idempotent handler it joins. */
  @Transactional()
  async addTwice(intent: string): Promise<number[]> {
    return [await this.add(intent), await this.add(intent)];
  }
}

/** Refuses a negative amount, as a ValidationPipe would: before the handler, inside the claim. */
class PositiveAmount implements PipeTransform {
  transform(value: unknown) {
    const amount = (value as { amount?: number } | undefined)?.amount;
    if (typeof amount !== 'number' || amount < 0) throw new BadRequestException('amount must be ≥ 0');
    return value;
  }
}

/** A filter with its own error format: its bytes are what is stored and replayed. */
@Catch(HttpException)
class TeapotFilter implements ExceptionFilter {
  catch(exception: HttpException, host: ArgumentsHost) {
    const response = host.switchToHttp().getResponse<{
      status?(n: number): unknown;
      code?(n: number): unknown;
      header?(name: string, value: string): unknown;
      setHeader?(name: string, value: string): unknown;
      send?(body: string): unknown;
      end?(body: string): unknown;
    }>();
    const body = `{"teapot":${JSON.stringify(exception.message)},"at":"${randomBytes(4).toString('hex')}"}`;
    if (response.code) {
      response.code(exception.getStatus());
      response.header!('content-type', 'application/vnd.teapot+json');
      response.send!(body);
    } else {
      response.status!(exception.getStatus());
      response.setHeader!('content-type', 'application/vnd.teapot+json');
      response.end!(body);
    }
  }
}

type Body = { intent: string; amount?: number; fail?: string };
const failedOnce = new Set<string>();
/** What idem reported as `error` events: the failures it answered 500/503 for. */
const reported: IdemErrorEvent[] = [];
const events = createEvents();
events.on('error', (e) => reported.push(e));

@Controller()
class OrdersController {
  constructor(@Inject(EffectsRepository) private readonly effects: EffectsRepository) {}

  /** Writes through the repository (TransactionHost), then answers or throws. */
  @Post('orders')
  @Idempotent()
  async create(@Body() body: Body) {
    const id = await this.effects.add(body.intent, { amount: body.amount ?? 0 });
    if (body.fail === 'declined') throw new HttpException({ error: 'card_declined', id }, 402);
    if (body.fail === 'unavailable') throw new HttpException('provider down', 503);
    if (body.fail === 'crash') throw new Error('bug after the write');
    return { id, nonce: randomBytes(4).toString('hex') };
  }

  @Post('joined')
  @Idempotent()
  async joined(@Body() body: Body) {
    const ids = await this.effects.addTwice(body.intent);
    if (body.fail === 'after') throw new HttpException('refused after both writes', 503);
    return { ids };
  }

  /** The transaction as a parameter: Prisma's transaction client is `tx.client`. */
  @Post('param')
  @Idempotent()
  async param(@Body() body: Body, @IdemTransaction() tx: Transaction<Prisma.TransactionClient>) {
    const row = await tx.client.effect.create({ data: { tenant: 'acme', intent: body.intent } });
    return { id: row.id };
  }

  @Post('validated')
  @Idempotent()
  @UsePipes(PositiveAmount)
  async validated(@Body() body: Body) {
    return { id: await this.effects.add(body.intent) };
  }

  @Post('teapot')
  @Idempotent()
  @UseFilters(TeapotFilter)
  async teapot(@Body() body: Body) {
    await this.effects.add(body.intent);
    throw new HttpException("I'm a teapot", 418);
  }

  /** The second step fails once after its write: its transaction, the host's, rolls back. */
  @Post('steps')
  @Idempotent({ mode: 'steps' })
  async steps(@Body() body: Body, @IdemContext() idem: IdempotencyContext) {
    const first = await idem.step('first', () => this.effects.add(`${body.intent}:first`));
    const second = await idem.step('second', async () => {
      const id = await this.effects.add(`${body.intent}:second`);
      if (!failedOnce.has(body.intent)) {
        failedOnce.add(body.intent);
        throw new HttpException('provider down', 503);
      }
      return id;
    });
    return { first, second, resumed: idem.resumed };
  }

  /** Answers with an Observable that completes 300 ms after the write. */
  @Post('observable')
  @Idempotent()
  async observable(@Body() body: Body) {
    const id = await this.effects.add(body.intent);
    return timer(300).pipe(map(() => ({ id })));
  }

  /** Not idempotent: @Transactional opens its own transaction through idem's Sql. */
  @Post('plain')
  async plain(@Body() body: Body) {
    return { ids: await this.effects.addTwice(body.intent) };
  }
}

function appModule(prisma: PrismaClient, schema: string) {
  @Module({ providers: [{ provide: PRISMA, useValue: prisma }], exports: [PRISMA] })
  class PrismaModule {}

  @Module({
    imports: [
      PrismaModule,
      ClsModule.forRoot({
        global: true,
        middleware: { mount: true },
        plugins: [
          new ClsPluginTransactional({
            imports: [PrismaModule],
            adapter: new TransactionalAdapterIdem({
              connectionToken: PRISMA,
              sql: (p: PrismaClient) => fromPrisma(p),
            }),
          }),
        ],
      }),
      IdemModule.forRootAsync({
        imports: [PrismaModule],
        inject: [PRISMA, TransactionHost],
        useFactory: (p: PrismaClient, txHost: TransactionHost<PrismaAdapter>) => ({
          idem: createIdem({ sql: fromPrisma(p), schema }),
          tenant: (req) => req.headers['x-tenant'] as string | undefined,
          transactionHost: txHost,
          events,
        }),
      }),
    ],
    controllers: [OrdersController],
    providers: [EffectsRepository],
  })
  class AppModule {}
  return AppModule;
}

describe.each(['express', 'fastify'] as const)('NestJS + Prisma on %s', (platform) => {
  const schema = `idem_nest_${platform}_${randomBytes(3).toString('hex')}`;
  let db: OrmAdapterUnderTest<Prisma.TransactionClient, PrismaClient>;
  let app: INestApplication;
  let send: Send;
  const key = () => `nest-${randomBytes(5).toString('hex')}`;
  const rows = (intent: string) =>
    countRows(db.sql, `SELECT count(*)::int AS n FROM "${schema}".effects WHERE intent = $1`, [intent]);

  beforeAll(async () => {
    db = (await prepareAdapter(prismaFactory, schema)) as typeof db;
    const module = appModule(db.root, schema);
    app =
      platform === 'express'
        ? await NestFactory.create(module, { logger: false })
        : await NestFactory.create(module, new FastifyAdapter(), { logger: false });
    await app.listen(0, '127.0.0.1');
    send = client(`http://127.0.0.1:${((app.getHttpServer() as Server).address() as AddressInfo).port}`);
  });
  afterAll(async () => {
    await app?.close();
    await db?.close();
  });

  it('a repository on the TransactionHost writes in the key’s transaction: one row, replayed bytes', async () => {
    const k = key();
    const first = await send('/orders', { key: k, body: { intent: k, amount: 5 } });
    expect(first.status).toBe(201);
    const again = await send('/orders', { key: k, body: { intent: k, amount: 5 } });
    expect(again.replayed).toBe(true);
    expect(again.bytes.equals(first.bytes)).toBe(true);
    expect(await rows(k)).toBe(1);
    expect(app.get(Idem)).toBeInstanceOf(Idem);
    expect((await app.get(Idem).get({ tenant: 'acme', operation: 'POST /orders', key: k }))?.state).toBe(
      'completed',
    );
  });

  it("an exception filter's 402 is stored with the row and replayed; a 503 or a crash rolls the row back", async () => {
    const declined = key();
    const refused = await send('/orders', { key: declined, body: { intent: declined, fail: 'declined' } });
    expect(refused.status).toBe(402);
    expect(refused.json()).toMatchObject({ error: 'card_declined' });
    const replay = await send('/orders', { key: declined, body: { intent: declined, fail: 'declined' } });
    expect(replay).toMatchObject({ status: 402, replayed: true });
    expect(replay.bytes.equals(refused.bytes)).toBe(true);
    expect(await rows(declined)).toBe(1);

    for (const fail of ['unavailable', 'crash']) {
      const k = key();
      const failed = await send('/orders', { key: k, body: { intent: k, fail } });
      expect(failed.status).toBe(fail === 'crash' ? 500 : 503);
      expect(failed.replayed).toBe(false);
      expect(await rows(k)).toBe(0); // the repository's write rolled back with the key
      const retry = await send('/orders', { key: k, body: { intent: k, fail } });
      expect(retry.replayed).toBe(false); // nothing was stored: the retry ran afresh
    }
  });

  it("a method-scoped filter's own bytes are what is stored and replayed", async () => {
    const k = key();
    const first = await send('/teapot', { key: k, body: { intent: k } });
    expect(first.status).toBe(418);
    expect(first.header('content-type')?.startsWith('application/vnd.teapot+json')).toBe(true);
    const again = await send('/teapot', { key: k, body: { intent: k } });
    expect(again).toMatchObject({ status: 418, replayed: true });
    expect(again.bytes.equals(first.bytes)).toBe(true); // the filter's random `at` is the stored one
    expect(await rows(k)).toBe(1);
  });

  it('@Transactional() methods called by the handler join its transaction and roll back with it', async () => {
    const rolledBack = key();
    expect(
      (await send('/joined', { key: rolledBack, body: { intent: rolledBack, fail: 'after' } })).status,
    ).toBe(503);
    expect(await rows(rolledBack)).toBe(0);
    const k = key();
    const ok = await send('/joined', { key: k, body: { intent: k } });
    expect(ok.status).toBe(201);
    expect(await rows(k)).toBe(2);
    expect((await send('/joined', { key: k, body: { intent: k } })).replayed).toBe(true);
    expect(await rows(k)).toBe(2);
  });

  it('outside @Idempotent(), @Transactional() opens its own transaction through idem’s Sql', async () => {
    const intent = key();
    const plain = await send('/plain', { body: { intent } });
    expect(plain.status).toBe(201);
    expect(plain.json<{ ids: number[] }>().ids).toHaveLength(2);
    expect(await rows(intent)).toBe(2);
  });

  it('@IdemTransaction() hands the Prisma transaction client', async () => {
    const k = key();
    const first = await send('/param', { key: k, body: { intent: k } });
    expect(first.status).toBe(201);
    expect((await send('/param', { key: k, body: { intent: k } })).bytes.equals(first.bytes)).toBe(true);
    expect(await rows(k)).toBe(1);
  });

  it('a request refused by a pipe is not stored: the corrected request with the same key runs', async () => {
    const k = key();
    const refused = await send('/validated', { key: k, body: { intent: k, amount: -1 } });
    expect(refused.status).toBe(400);
    expect(await app.get(Idem).get({ tenant: 'acme', operation: 'POST /validated', key: k })).toBeNull();
    const corrected = await send('/validated', { key: k, body: { intent: k, amount: 1 } });
    expect(corrected.status).toBe(201);
    expect(corrected.replayed).toBe(false);
    expect(await rows(k)).toBe(1);
  });

  it('an Observable answer the client left before: Nest sends nothing, so idem rolls back after 1 s', async () => {
    const k = key();
    const abort = new AbortController();
    const gone = send('/observable', { key: k, body: { intent: k }, signal: abort.signal });
    setTimeout(() => abort.abort(), 100);
    await expect(gone).rejects.toThrow();
    await new Promise((resolve) => setTimeout(resolve, 1600));
    expect(await rows(k)).toBe(0);
    expect(
      reported.some(
        (e) => e.source === 'nestjs' && String((e.error as Error).message).includes('the client left'),
      ),
    ).toBe(true);
    const retry = await send('/observable', { key: k, body: { intent: k } });
    expect(retry).toMatchObject({ status: 201, replayed: false });
    expect(await rows(k)).toBe(1);
    expect((await send('/observable', { key: k, body: { intent: k } })).bytes.equals(retry.bytes)).toBe(true);
  });

  it('steps mode: each step writes through the TransactionHost in its own transaction', async () => {
    const k = key();
    const failed = await send('/steps', { key: k, body: { intent: k } });
    expect(failed.status).toBe(503);
    expect(await rows(`${k}:first`)).toBe(1); // committed with its step record
    expect(await rows(`${k}:second`)).toBe(0); // rolled back with the failed step
    const resumed = await send('/steps', { key: k, body: { intent: k } });
    expect(resumed.status).toBe(201);
    expect(resumed.json()).toMatchObject({ resumed: true });
    expect(await rows(`${k}:first`)).toBe(1);
    expect(await rows(`${k}:second`)).toBe(1);
    expect((await send('/steps', { key: k, body: { intent: k } })).replayed).toBe(true);
  });
});
