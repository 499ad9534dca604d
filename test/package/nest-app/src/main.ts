import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, NestFastifyApplication } from '@nestjs/platform-fastify';
import { AppModule } from './app.module';

async function bootstrap() {
  // PLATFORM=fastify starts it on @nestjs/platform-fastify; Express otherwise, as the template.
  const app =
    process.env.PLATFORM === 'fastify'
      ? await NestFactory.create<NestFastifyApplication>(AppModule, new FastifyAdapter())
      : await NestFactory.create(AppModule);
  await app.listen(process.env.PORT ?? 3000, '127.0.0.1');
  console.log(`listening on ${await app.getUrl()}`);
}
bootstrap();
