/**
 * Options of the neutral core, through the thinnest integration (node:http) on a real server and
 * database: setup errors, the single-tenant opt-out, operation override, replayed-header choice,
 * problem type base, and a serialization failure at COMMIT (the handler must not run twice).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createIdem, type Idem, isIdemError } from 'idem';
import { type NodeHttpIdempotencyOptions, idempotency as nodeIdempotency } from 'idem/node-http';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { recordings } from '../support/recordings.js';
import { client } from '../support/http/client.js';
import { errorsInto } from '../support/http/apps.js';

describe.each(recordings)('HTTP idempotency options, recorded at %s', (recording) => {
  let db: TestSchema;
  let idem: Idem;
  const servers: Server[] = [];
  let runs = 0;

  beforeAll(async () => {
    db = await createTestSchema({ poolSize: 4 });
    idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, recording });
    await db.pool.query(`
      CREATE TABLE "${db.schema}".widgets (id serial PRIMARY KEY, key text NOT NULL);
      CREATE FUNCTION "${db.schema}".conflict_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'simulated serialization failure' USING ERRCODE = 'serialization_failure'; END $$;
      CREATE TABLE "${db.schema}".contested (id serial PRIMARY KEY);
      CREATE CONSTRAINT TRIGGER contested_at_commit AFTER INSERT ON "${db.schema}".contested
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "${db.schema}".conflict_at_commit();
    `);
  });
  afterAll(async () => {
    for (const server of servers) {
      server.closeAllConnections();
      server.close();
    }
    await db.close();
  });

  async function serve(options: Partial<NodeHttpIdempotencyOptions>, table = 'widgets') {
    const handler = nodeIdempotency({
      idem,
      events: errorsInto([]),
      ...options,
      handler: async (req, res) => {
        runs++;
        const { rows } = await req.idem!.tx.query<{ id: number }>(
          table === 'widgets'
            ? `INSERT INTO "${db.schema}".widgets (key) VALUES ($1) RETURNING id`
            : `INSERT INTO "${db.schema}".contested DEFAULT VALUES RETURNING id`,
          table === 'widgets' ? [req.idem!.key] : [],
        );
        res.setHeader('set-cookie', 'widget=1');
        res.setHeader('x-widget-version', '7');
        res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: rows[0]!.id }));
      },
    });
    const server = createServer((req, res) => void handler(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    servers.push(server);
    return client(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  }

  it('refuses a setup without a tenant scope, or with never-replayed headers', () => {
    const setupError = (options: object) => {
      try {
        // The middleware builds its engine at once: a setup error throws here, not per request.
        nodeIdempotency({ idem, handler: async () => undefined, ...options });
      } catch (error) {
        return isIdemError(error) ? error.code : error;
      }
      return 'accepted';
    };
    expect(setupError({})).toBe('IDEM_INVALID_ARGUMENT');
    expect(setupError({ singleTenant: false })).toBe('IDEM_INVALID_ARGUMENT');
    expect(setupError({ singleTenant: true, tenant: () => 'a' })).toBe('IDEM_INVALID_ARGUMENT');
    expect(setupError({ singleTenant: true })).toBe('accepted');
    for (const header of ['date', 'Transfer-Encoding', 'connection', 'content-length']) {
      expect(setupError({ singleTenant: true, replayHeaders: [header] })).toBe('IDEM_INVALID_ARGUMENT');
    }
    expect(setupError({ singleTenant: true, maxBodyBytes: 0 })).toBe('IDEM_INVALID_ARGUMENT');
    expect(setupError({ singleTenant: true, mode: 'saga' })).toBe('IDEM_INVALID_ARGUMENT');
  });

  it('single-tenant opt-out, operation override, chosen replay headers and problem type base', async () => {
    const send = await serve({
      singleTenant: true,
      operation: 'create-widget',
      route: '/widgets',
      replayHeaders: ['content-type', 'set-cookie', 'x-widget-version'],
      problemTypeBase: 'https://api.example.test/problems/',
    });
    const key = `w-${randomBytes(4).toString('hex')}`;
    const first = await send('/widgets', { key, tenant: null, body: { size: 1 } });
    expect(first.status).toBe(201);
    expect(await idem.get({ tenant: 'default', operation: 'create-widget', key })).not.toBeNull();
    const replay = await send('/widgets', { key, tenant: null, body: { size: 1 } });
    expect(replay.replayed).toBe(true);
    expect(replay.header('set-cookie')).toBe('widget=1');
    expect(replay.header('x-widget-version')).toBe('7');
    const reused = await send('/widgets', { key, tenant: null, body: { size: 2 } });
    expect(reused.status).toBe(422);
    expect(reused.json()).toMatchObject({ type: 'https://api.example.test/problems/key-reused' });
  });

  it('a serialization failure at COMMIT: the handler is not run twice; 503 commit-failed, nothing stored', async () => {
    const send = await serve({ tenant: () => 'acme', route: '/contested' }, 'contested');
    const key = `c-${randomBytes(4).toString('hex')}`;
    const before = runs;
    const response = await send('/contested', { key, body: {} });
    expect(response.status).toBe(503);
    expect(response.json()).toMatchObject({ code: 'IDEM_COMMIT_FAILED', retryable: true });
    expect(runs - before).toBe(1);
    expect(await idem.get({ tenant: 'acme', operation: 'POST /contested', key })).toBeNull();
    expect((await db.pool.query(`SELECT 1 FROM "${db.schema}".contested`)).rowCount).toBe(0);
  });
});
