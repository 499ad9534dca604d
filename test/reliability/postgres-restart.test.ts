/**
 * A PostgreSQL restart in the middle of a run. Not the shared server (other test files run
 * against it in parallel): a server of this file's own, started with `startEmbeddedPostgres` on
 * its own folder and port, stopped (a fast shutdown: every session is terminated with 57P01) and
 * started again while clients keep sending payments. The service is not touched: the same pool,
 * the same server, no operator action. Every intent must still end with one answer and one effect,
 * and the answers during the outage must be retryable 503s, never a 500 or a crash.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { errorsInto } from '../support/http/apps.js';
import { createIdem, isRetryable, migrate } from 'idem';
import { type EmbeddedDatabase, startEmbeddedPostgres } from '../support/embedded.js';
import { idempotency as nodeIdempotency } from 'idem/node-http';
import { createEffects, effectsOf } from '../support/faults/effects.js';
import { postUntilAnswered, type Attempted } from '../support/faults/retrying-client.js';

const dir = `.idem/reliability-pg-${randomBytes(4).toString('hex')}`;
const schema = 'idem';
let database: EmbeddedDatabase;
let port: number;
let pool: pg.Pool;
let server: Server;
let base: string;
const handlerErrors: unknown[] = [];

beforeAll(async () => {
  database = await startEmbeddedPostgres({ dir, persistent: true });
  port = Number(new URL(database.url).port);
  pool = new pg.Pool({ connectionString: database.url, max: 8, connectionTimeoutMillis: 5000 });
  pool.on('error', () => undefined); // idle connections die with the server; the pool replaces them
  await migrate(fromPg(pool), { schema });
  await createEffects(pool, schema);
  const idem = createIdem({ sql: fromPg(pool), schema });
  const handler = nodeIdempotency({
    idem,
    tenant: () => 'acme',
    route: '/payments',
    events: errorsInto(handlerErrors),
    handler: async (req, res) => {
      const { key, amount } = req.body as { key: string; amount: number };
      try {
        await req.idem!.tx.query(`INSERT INTO ${schema}.effects (key, amount) VALUES ($1, $2)`, [
          key,
          amount,
        ]);
      } catch (error) {
        // The handler's own write lost its connection. node:http's integration answers a throw with
        // 500; an application says "retry" for a transient error, as here (5xx are never stored).
        if (!isRetryable(error)) throw error;
        res.writeHead(503, { 'retry-after': '1', 'content-type': 'application/problem+json' });
        res.end(JSON.stringify({ type: 'urn:app:unavailable', title: 'Try again', status: 503 }));
        return;
      }
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ key, amount }));
    },
  });
  server = createServer((req, res) => void handler(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}, 120_000);

afterAll(async () => {
  await new Promise<void>((resolve) => server?.close(() => resolve()));
  await pool?.end().catch(() => undefined);
  await database?.stop().catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
  // As root in a private folder the data lives elsewhere (src/embedded/embedded-postgres.ts).
  if (database) rmSync(database.dataDir, { recursive: true, force: true });
}, 60_000);

it('recovers from a PostgreSQL restart without operator action; every intent has one effect', async () => {
  const clients = 6;
  const perClient = 12;
  const results: { key: string; result: Attempted }[] = [];
  let restarted: () => void = () => undefined;
  const restartDone = new Promise<void>((resolve) => (restarted = resolve));
  let answered = 0;

  const restart = (async () => {
    // Restart once the run is well under way, so requests are in flight when the server goes.
    while (answered < clients * 2) await new Promise((r) => setTimeout(r, 20));
    await database.stop({ waitForSessionsMs: 0 });
    await new Promise((r) => setTimeout(r, 500));
    database = await startEmbeddedPostgres({ dir, port, persistent: true });
    restarted();
  })();

  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      for (let i = 0; i < perClient; i++) {
        // The second half of each client's intents starts after the restart: the pool must serve them.
        if (i === perClient / 2) await restartDone;
        const key = `pay-${c}-${i}-${randomUUID()}`;
        const result = await postUntilAnswered(
          `${base}/payments`,
          key,
          { key, amount: 100 + i },
          { deadlineMs: 90_000 },
        );
        results.push({ key, result });
        answered++;
      }
    }),
  );
  await restart;

  expect(results).toHaveLength(clients * perClient);
  for (const { key, result } of results) {
    expect(result.status, key).toBe(201);
    expect(JSON.parse(result.body)).toMatchObject({ key });
  }
  const effects = await effectsOf(
    pool,
    schema,
    results.map((r) => r.key),
  );
  expect([...effects.values()].every((n) => n === 1)).toBe(true);
  const { rows } = await pool.query<{ state: string; n: number }>(
    `SELECT state, count(*)::int AS n FROM ${schema}.requests GROUP BY state`,
  );
  expect(rows).toEqual([{ state: 'completed', n: clients * perClient }]);

  const seen = results.flatMap((r) => r.result.seen);
  // The outage was seen by clients (the test exercised it) and it was answered as retryable.
  expect(seen.length).toBeGreaterThan(0);
  const described = handlerErrors.map((e) =>
    e instanceof Error ? `${e.message} / cause: ${String((e as { cause?: unknown }).cause)}` : String(e),
  );
  expect(
    seen.filter((s) => s !== '503' && s !== 'network' && s !== '409'),
    described.join('\n'),
  ).toEqual([]);
}, 150_000);
