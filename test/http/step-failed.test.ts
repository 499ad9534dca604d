/**
 * Steps mode over HTTP: what a client gets when a request fails for good part-way, and what its
 * retries get. A real node:http server (idem/node-http) on 127.0.0.1, a real provider, real
 * PostgreSQL; the deterministic failure is PostgreSQL's own 22021 (a NUL byte in a text column).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createIdem, deriveKey, type Idem } from 'idem';
import { idempotency as nodeIdempotency } from 'idem/node-http';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { errorsInto } from '../support/http/apps.js';
import { startFakeProvider, type FakeProvider } from '../support/fake-provider.js';

describe('steps mode: a request that fails for good', () => {
  let db: TestSchema;
  let provider: FakeProvider;
  let idem: Idem;
  let server: Server;
  let url: string;
  const runs = new Map<string, number>();
  const errors: unknown[] = [];

  beforeAll(async () => {
    db = await createTestSchema();
    await db.pool.query(`CREATE TABLE "${db.schema}".charges (key text NOT NULL, note text NOT NULL)`);
    provider = await startFakeProvider();
    idem = createIdem({ sql: fromPg(db.pool), schema: db.schema });
    const pay = nodeIdempotency({
      idem,
      tenant: () => 'acme',
      route: '/pay',
      mode: 'steps',
      events: errorsInto(errors),
      handler: async (req, res) => {
        const context = req.idem!;
        runs.set(context.key, (runs.get(context.key) ?? 0) + 1);
        const { note, callFirst } = req.body as { note: string; callFirst: boolean };
        if (callFirst) {
          await context.call('charge', async ({ key, signal }) => {
            const response = await fetch(`${provider.url}/charges`, {
              method: 'POST',
              headers: { 'idempotency-key': key, 'content-type': 'application/json' },
              body: '{"amount":1}',
              signal,
            });
            return (await response.json()) as { id: string };
          });
        }
        await context.step('record', (tx) =>
          tx.query(`INSERT INTO "${db.schema}".charges (key, note) VALUES ($1, $2)`, [context.key, note]),
        );
        res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}');
      },
    });
    server = createServer((req, res) => void pay(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
    await provider.close();
    await db.close();
  });

  const send = async (key: string, body: unknown) => {
    const response = await fetch(`${url}/pay`, {
      method: 'POST',
      headers: { 'idempotency-key': `"${key}"`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return {
      status: response.status,
      type: response.headers.get('content-type'),
      replayed: response.headers.get('idempotent-replayed'),
      json: (await response.json()) as Record<string, unknown>,
    };
  };

  it('after a call: 500 step-failed, stored; every retry gets the same problem and nothing runs again', async () => {
    const key = `after-call-${randomBytes(4).toString('hex')}`;
    const body = { note: 'nul \u0000 byte', callFirst: true };
    const first = await send(key, body);
    expect(first).toMatchObject({
      status: 500,
      type: 'application/problem+json',
      json: {
        type: 'urn:idem:problem:step-failed',
        code: 'IDEM_STEP_FAILED',
        status: 500,
        retryable: false,
      },
    });
    expect(JSON.stringify(first.json)).not.toContain('byte sequence'); // the error stays server-side
    expect(errors.some((e) => (e as { code?: string }).code === 'IDEM_STEP_FAILED')).toBe(true);

    const retry = await send(key, body);
    expect(retry).toEqual({ ...first, replayed: null });
    expect(runs.get(key)).toBe(1);
    const scope = { tenant: 'acme', operation: 'POST /pay', key };
    expect(provider.calls.filter((c) => c.key === deriveKey(scope, 'charge'))).toHaveLength(1);
    expect(await idem.get(scope)).toMatchObject({ state: 'failed', errorStep: 'record' });
  });

  it('before anything was committed: 500 internal, nothing stored; the retry runs afresh', async () => {
    const key = `fresh-${randomBytes(4).toString('hex')}`;
    const body = { note: 'nul \u0000 byte', callFirst: false };
    const first = await send(key, body);
    expect(first).toMatchObject({ status: 500, json: { type: 'urn:idem:problem:internal' } });
    expect(await idem.get({ tenant: 'acme', operation: 'POST /pay', key })).toBeNull();
    const retry = await send(key, body);
    expect(retry.json.type).toBe('urn:idem:problem:internal');
    expect(runs.get(key)).toBe(2);
  });
});
