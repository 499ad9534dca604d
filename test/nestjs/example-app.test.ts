/**
 * examples/nestjs-prisma, the app docs/guide/nestjs.md walks through, started as it is on Express
 * and on Fastify against the real PostgreSQL, and its code blocks in docs/guide/nestjs.md checked
 * against the files.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { INestApplication } from '@nestjs/common';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootstrap } from '../../examples/nestjs-prisma/main.js';
import { client, type Send } from '../support/http/client.js';
import { databaseUrl, dropAndEnd } from '../support/database.js';

describe.each([false, true])('examples/nestjs-prisma (fastify: %s)', (fastify) => {
  const schema = `idem_nest_example_${randomBytes(3).toString('hex')}`;
  let app: INestApplication;
  let send: Send;
  const pool = () => new pg.Pool({ connectionString: databaseUrl(), max: 1 });
  const orders = async (note: string) => {
    const p = pool();
    try {
      const { rows } = await p.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".orders WHERE note = $1`,
        [note],
      );
      return rows[0]!.n;
    } finally {
      await p.end();
    }
  };

  beforeAll(async () => {
    app = await bootstrap({ url: databaseUrl(), schema, port: 0, fastify, logger: false });
    send = client(await app.getUrl());
  });
  afterAll(async () => {
    await app?.close();
    const p = pool();
    await dropAndEnd(schema, p)();
  });

  it('creates one order per key and replays the same bytes', async () => {
    for (const path of ['/orders', '/orders/direct']) {
      const key = `example-${randomBytes(4).toString('hex')}`;
      const note = `note-${key}`;
      const first = await send(path, { key, body: { amount: 40, note } });
      expect(first.status).toBe(201);
      const retry = await send(path, { key, body: { amount: 40, note } });
      expect(retry.replayed).toBe(true);
      expect(retry.bytes.equals(first.bytes)).toBe(true);
      expect(await orders(note)).toBe(1);
      expect((await send(path, { key, body: { amount: 41, note } })).status).toBe(422);
    }
  });

  it('a body its pipe refuses gets 400 and stores nothing: the corrected request reuses the key', async () => {
    const key = `example-${randomBytes(4).toString('hex')}`;
    const note = `fixed-${key}`;
    expect((await send('/orders', { key, body: { amount: -5, note } })).status).toBe(400);
    const fixed = await send('/orders', { key, body: { amount: 5, note } });
    expect(fixed).toMatchObject({ status: 201, replayed: false });
    expect(await orders(note)).toBe(1);
  });

  it('stores the 402 its exception filter answers, with its order', async () => {
    const key = `example-${randomBytes(4).toString('hex')}`;
    const note = `over-${key}`;
    const refused = await send('/orders', { key, body: { amount: 20_000, note } });
    expect(refused.status).toBe(402);
    const retry = await send('/orders', { key, body: { amount: 20_000, note } });
    expect(retry).toMatchObject({ status: 402, replayed: true });
    expect(await orders(note)).toBe(1);
  });
});

describe('docs/guide/nestjs.md', () => {
  it('shows the example files as they are', () => {
    const doc = readFileSync(new URL('../../docs/guide/nestjs.md', import.meta.url), 'utf8');
    const blocks = [...doc.matchAll(/```ts\n(\/\/ (examples\/nestjs-prisma\/[\w.-]+)\n[\s\S]*?)```/g)];
    expect(blocks.map((b) => b[2]).sort()).toEqual([
      'examples/nestjs-prisma/app.module.ts',
      'examples/nestjs-prisma/main.ts',
      'examples/nestjs-prisma/orders.controller.ts',
      'examples/nestjs-prisma/prisma.service.ts',
    ]);
    for (const [, block, path] of blocks) {
      expect(block, path).toBe(readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8'));
    }
  });
});
