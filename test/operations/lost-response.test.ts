/**
 * Seed scenario 1: the server commits, the response never reaches the client. A real HTTP server
 * runs a keyed operation; the client sends the request and cuts the connection before the answer.
 */
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { createIdem } from '../../src/operations/idem.js';
import { createTestSchema, type TestSchema } from '../support/database.js';

describe('lost response', () => {
  let db: TestSchema;
  let server: Server;
  let url: string;
  let committed!: () => void;
  let commits = new Promise<void>((r) => (committed = r));

  beforeAll(async () => {
    db = await createTestSchema();
    await db.pool.query(`CREATE TABLE "${db.schema}".orders (id serial PRIMARY KEY, amount int NOT NULL)`);
    const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema });
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = JSON.parse(Buffer.concat(chunks).toString()) as { amount: number };
        idem
          .run(
            {
              tenant: 'acme',
              operation: 'create-order',
              key: String(req.headers['idempotency-key']),
              request: body,
            },
            async (tx) => {
              const { rows } = await tx.query<{ id: number }>(
                `INSERT INTO "${db.schema}".orders (amount) VALUES ($1) RETURNING id`,
                [body.amount],
              );
              return { id: rows[0]!.id, amount: body.amount };
            },
          )
          .then((result) => {
            committed();
            res.writeHead(201, {
              'content-type': 'application/json',
              'idempotent-replayed': String(result.replayed),
            });
            res.end(JSON.stringify(result.value));
          })
          .catch(() => res.writeHead(500).end());
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
    await db.close();
  });

  it('a retry after a lost response gets the same result, and there is one order', async () => {
    const body = JSON.stringify({ amount: 1250 });
    // First attempt: send everything, then drop the connection before any answer arrives.
    await new Promise<void>((resolve) => {
      const req = httpRequest(`${url}/orders`, {
        method: 'POST',
        headers: { 'idempotency-key': 'lost-1', 'content-type': 'application/json' },
      });
      req.on('error', () => resolve());
      req.on('response', () => {
        throw new Error('the response should have been lost');
      });
      req.end(body, () => {
        req.destroy();
        resolve();
      });
    });
    await commits; // the server committed although the client never heard back
    commits = new Promise<void>((r) => (committed = r));

    const retry = await fetch(`${url}/orders`, {
      method: 'POST',
      headers: { 'idempotency-key': 'lost-1', 'content-type': 'application/json' },
      body,
    });
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    const value = (await retry.json()) as { id: number; amount: number };
    const { rows } = await db.pool.query<{ id: number; amount: number }>(
      `SELECT id, amount FROM "${db.schema}".orders`,
    );
    expect(rows).toEqual([value]);
  });
});
