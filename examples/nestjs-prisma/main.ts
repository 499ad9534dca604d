// examples/nestjs-prisma/main.ts
// Starts the app on Express (or Fastify), after idem's migrations and the example's table.
// `node --import tsx/esm examples/nestjs-prisma/main.ts [--fastify]`, with DATABASE_URL, and PORT
// (3000) and IDEM_SCHEMA (public, for idem's tables and the example's) if you like.
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { migrate } from 'idem';
import { fromPrisma } from 'idem/prisma';
import { AppModule } from './app.module.js';
import { PrismaService } from './prisma.service.js';

export interface BootstrapOptions {
  url: string;
  schema?: string;
  port?: number;
  fastify?: boolean;
  logger?: false;
}

export async function bootstrap(options: BootstrapOptions) {
  const module = AppModule.forRoot({ url: options.url, schema: options.schema ?? 'public' });
  // rawBody: Nest keeps the bytes it parsed, so idem's maxBodyBytes holds for chunked bodies too.
  const settings = { rawBody: true, ...(options.logger === false ? { logger: false as const } : {}) };
  const app = options.fastify
    ? await NestFactory.create(module, new FastifyAdapter(), settings)
    : await NestFactory.create(module, settings);
  const prisma = app.get(PrismaService);
  const schema = options.schema ?? 'public';
  await migrate(fromPrisma(prisma), { schema }); // or `npx idem migrate` in your deploy
  await prisma.$executeRawUnsafe(
    `CREATE TABLE IF NOT EXISTS "${schema}".orders (id serial PRIMARY KEY, tenant text NOT NULL, amount int NOT NULL, note text)`,
  ); // `prisma migrate deploy` in a real app
  await app.listen(options.port ?? 3000, '127.0.0.1');
  return app;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await bootstrap({
    url: process.env.DATABASE_URL!,
    schema: process.env.IDEM_SCHEMA || undefined,
    port: process.env.PORT ? Number(process.env.PORT) : undefined,
    fastify: process.argv.includes('--fastify'),
  });
  console.log(`listening on ${await app.getUrl()}`);
}
