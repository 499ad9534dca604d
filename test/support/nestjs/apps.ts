/**
 * The contract suite's service (test/support/http/apps.ts) as a NestJS 12 app, on
 * @nestjs/platform-express and on @nestjs/platform-fastify: one controller with `@Idempotent()`
 * routes, the business written once (business.ts), Nest's own body parsing, status codes and
 * exception filters. The controller is made per harness, so it needs no dependency injection.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  Body,
  Controller,
  Get,
  Headers,
  HttpCode,
  Module,
  Param,
  Patch,
  Post,
  Res,
  StreamableFile,
  type INestApplication,
} from '@nestjs/common';
import { APP_FILTER, NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { createEvents } from 'idem';
import type { IdempotencyContext } from 'idem/http';
import {
  IdemContext,
  IdemModule,
  type IdemModuleOptions,
  IdempotencyBodyFilter,
  Idempotent,
} from 'idem/nestjs';
import type { Framework, RunningApp } from '../http/apps.js';
import { business, type Reply } from '../http/business.js';
import type { Harness } from '../http/harness.js';

type Body = Record<string, unknown> | undefined;

/** Status, headers and body of a business reply, on Express's `res` or Fastify's `reply`. */
function render(response: unknown, reply: Reply): unknown {
  const fastify = response as { code?(n: number): unknown; header(name: string, value: unknown): unknown };
  const express = response as {
    status(n: number): unknown;
    setHeader(name: string, value: unknown): unknown;
  };
  if (typeof fastify.code === 'function') fastify.code(reply.status);
  else express.status(reply.status);
  const setHeader = (name: string, value: unknown) =>
    typeof fastify.code === 'function' ? fastify.header(name, value) : express.setHeader(name, value);
  for (const [name, value] of Object.entries(reply.headers ?? {})) setHeader(name, value);
  if (!reply.raw) return reply.json;
  const { data, contentType } = reply.raw;
  if (typeof data === 'string') {
    setHeader('content-type', contentType);
    return data;
  }
  return new StreamableFile(Buffer.from(data), { type: contentType });
}

function contractController(h: Harness) {
  const biz = business(h);

  @Controller()
  class ContractController {
    @Post('orders')
    @Idempotent()
    async createOrder(
      @IdemContext() idem: IdempotencyContext,
      @Body() body: Body,
      @Headers('x-test-gate') gate: string | undefined,
      @Res({ passthrough: true }) res: unknown,
    ) {
      return render(res, await biz.createOrder(idem, body, gate));
    }

    @Patch('orders/:id')
    @Idempotent()
    async updateOrder(
      @IdemContext() idem: IdempotencyContext,
      @Param('id') id: string,
      @Body() body: Body,
      @Res({ passthrough: true }) res: unknown,
    ) {
      return render(res, await biz.updateOrder(idem, id, body));
    }

    @Post('payments')
    @Idempotent()
    async pay(
      @IdemContext() idem: IdempotencyContext,
      @Body() body: Body,
      @Res({ passthrough: true }) res: unknown,
    ) {
      return render(res, await biz.pay(idem, body));
    }

    @Post('flaky')
    @Idempotent()
    async flaky(@IdemContext() idem: IdempotencyContext, @Res({ passthrough: true }) res: unknown) {
      return render(res, await biz.flaky(idem)); // its first run throws: Nest's filter answers 500
    }

    @Post('fragile')
    @Idempotent()
    async fragile(@IdemContext() idem: IdempotencyContext, @Res({ passthrough: true }) res: unknown) {
      return render(res, await biz.fragile(idem));
    }

    @Post('bytes/:kind')
    @Idempotent()
    async bytes(
      @IdemContext() idem: IdempotencyContext,
      @Param('kind') kind: string,
      @Res({ passthrough: true }) res: unknown,
    ) {
      return render(res, await biz.bytes(idem, kind));
    }

    @Post('inflight')
    @Idempotent({ waitMs: 300 })
    async inflight(
      @IdemContext() idem: IdempotencyContext,
      @Body() body: Body,
      @Headers('x-test-gate') gate: string | undefined,
      @Res({ passthrough: true }) res: unknown,
    ) {
      return render(res, await biz.createOrder(idem, body, gate));
    }

    @Post('ephemeral')
    @Idempotent({ retention: { resultMs: 60_000, tombstoneMs: 120_000 } })
    async ephemeral(
      @IdemContext() idem: IdempotencyContext,
      @Body() body: Body,
      @Res({ passthrough: true }) res: unknown,
    ) {
      return render(res, await biz.createOrder(idem, body, undefined));
    }

    @Post('checkout')
    @Idempotent({ mode: 'steps', waitMs: 300 })
    async checkout(
      @IdemContext() idem: IdempotencyContext,
      @Body() body: Body,
      @Headers('x-test-gate') gate: string | undefined,
      @Res({ passthrough: true }) res: unknown,
    ) {
      return render(res, await biz.checkout(idem, body, gate));
    }

    @Post('optional')
    @HttpCode(200)
    @Idempotent({ required: false })
    optional(@IdemContext() idem: IdempotencyContext | undefined) {
      return { idem: idem !== undefined };
    }

    @Get('health')
    health() {
      return 'ok';
    }
  }
  return ContractController;
}

function appModule(h: Harness, errors: unknown[]) {
  const events = createEvents();
  events.on('error', ({ error }) => errors.push(error));
  const options: IdemModuleOptions = {
    idem: h.idem,
    tenant: (req) => req.headers['x-tenant'] as string | undefined,
    maxBodyBytes: 16 * 1024,
    fingerprint: { exclude: ['clientTime'] },
    events,
  };
  @Module({
    imports: [IdemModule.forRoot(options)],
    controllers: [contractController(h)],
    // Nest's body parsers refuse malformed or oversized bodies before any interceptor: the filter
    // answers those refusals of keyed requests with problem documents.
    providers: [{ provide: APP_FILTER, useExisting: IdempotencyBodyFilter }],
  })
  class ContractModule {}
  return ContractModule;
}

async function listening(app: INestApplication, h: Harness, errors: unknown[]): Promise<RunningApp> {
  await app.listen(0, '127.0.0.1');
  const server = app.getHttpServer() as Server;
  server.on('request', () => h.arrivals.count++);
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    errors,
    close: async () => {
      server.closeAllConnections();
      await app.close();
    },
  };
}

const nestExpress: Framework = {
  name: 'nestjs-express',
  async start(h) {
    const errors: unknown[] = [];
    // rawBody: Nest keeps the bytes it parsed, so maxBodyBytes holds for bodies without a length.
    const app = await NestFactory.create(appModule(h, errors), { logger: false, rawBody: true });
    return listening(app, h, errors);
  },
};

const nestFastify: Framework = {
  name: 'nestjs-fastify',
  async start(h) {
    const errors: unknown[] = [];
    const adapter = new FastifyAdapter();
    adapter
      .getInstance()
      .addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_req, body, done) =>
        done(null, body),
      );
    const app = await NestFactory.create<NestFastifyApplication>(appModule(h, errors), adapter, {
      logger: false,
      rawBody: true,
    });
    return listening(app, h, errors);
  },
};

export const nestFrameworks: Framework[] = [nestExpress, nestFastify];
