import { Test, TestingModule } from '@nestjs/testing';
import { INestApplication } from '@nestjs/common';
import { FastifyAdapter, NestFastifyApplication } from '@nestjs/platform-fastify';
import * as request from 'supertest';
import { App } from 'supertest/types';
import { randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { migrate } from 'idem';
import { fromPg } from 'idem/pg';
import { AppModule } from './../src/app.module';

interface OrderCount {
  n: number;
}

const schema = process.env.APP_SCHEMA ?? 'public';

describe.each(['express', 'fastify'])('OrdersController (e2e, %s)', (platform) => {
  let app: INestApplication<App>;
  const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
  const sql = fromPg(pool);

  const orders = async (note: string) => {
    const { rows } = await sql.query<OrderCount>(
      `SELECT count(*)::int AS n FROM "${schema}".orders WHERE note = $1`,
      [note],
    );
    return rows[0].n;
  };

  beforeAll(async () => {
    // idem's tables, from the migrations/ folder of the installed package.
    await migrate(sql, { schema });
    await sql.query(
      `CREATE TABLE IF NOT EXISTS "${schema}".orders (id bigserial PRIMARY KEY, total integer NOT NULL, note text)`,
    );
  });

  beforeEach(async () => {
    const moduleFixture: TestingModule = await Test.createTestingModule({
      imports: [AppModule],
    }).compile();

    if (platform === 'fastify') {
      const fastify = moduleFixture.createNestApplication<NestFastifyApplication>(new FastifyAdapter());
      await fastify.init();
      await fastify.getHttpAdapter().getInstance().ready();
      app = fastify as unknown as INestApplication<App>;
    } else {
      app = moduleFixture.createNestApplication();
      await app.init();
    }
  });

  afterEach(async () => {
    await app.close();
  });

  afterAll(async () => {
    await pool.end();
  });

  it.each(['/orders', '/orders/direct'])('POST %s: one order per key, the retry replayed', async (path) => {
    const key = randomUUID();
    const note = `${platform}-${key}`;
    const first = await request(app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', key)
      .send({ total: 40, note })
      .expect(201);
    expect(first.body).toMatchObject({ total: 40, note });
    expect(first.headers['idempotent-replayed']).toBeUndefined();

    const retry = await request(app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', key)
      .send({ total: 40, note })
      .expect(201)
      .expect('Idempotent-Replayed', 'true');
    expect(retry.text).toBe(first.text);
    expect(await orders(note)).toBe(1);

    const other = await request(app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', key)
      .send({ total: 41, note })
      .expect(422);
    expect(other.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(await orders(note)).toBe(1);
  });
});
