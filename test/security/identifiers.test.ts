/**
 * The schema name is the one identifier idem splices into SQL text; every API that takes one
 * validates it (`^[a-z_][a-z0-9_]{0,62}$`, then double-quoted) and refuses anything else with
 * `InvalidArgumentError` before a statement is sent. Every other name (tenant, operation, key,
 * consumer, queue, topic, source, saga) is a bound parameter: hostile text is stored and matched
 * as data, never run.
 */
import { randomUUID } from 'node:crypto';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createClaims } from 'idem/claims';
import { consolePlugin } from 'idem/console';
import { createIdem, isIdemError, migrate, migrations, migrationScript } from 'idem';
import { createInbox } from 'idem/inbox';
import { createIdemMetrics } from 'idem/metrics';
import { createOutbox, createOutboxDispatcher } from 'idem/outbox';
import {
  createStandardWebhooksVerifier,
  createWebhookProcessor,
  createWebhookReceiver,
  createWebhookSender,
} from 'idem/webhooks';
import { createSagas, defineSaga, step } from 'idem/workflow';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';

const run = promisify(execFile);

export const hostileSchemas = [
  '',
  'Idem',
  'idem-x',
  'idem x',
  '1idem',
  'idem.requests',
  '"idem"',
  'idem"; DROP SCHEMA public CASCADE; --',
  "idem'; DROP TABLE x; --",
  'idem;',
  'idem\u0000',
  'ídem',
  'i'.repeat(64),
  'idem\n',
  'public"."requests',
];

let db: TestSchema;
beforeAll(async () => {
  db = await createTestSchema();
  await db.pool.query(`CREATE TABLE "${db.schema}".canary (id int)`);
});
afterAll(() => db.close());

const refusesInvalidArgument = (error: unknown) =>
  isIdemError(error) && error.code === 'IDEM_INVALID_ARGUMENT';

/** Every API that takes a schema name, called with `schema`. Sync throws and rejections both count. */
function constructors(schema: string): [string, () => unknown][] {
  const sql = fromPg(db.pool);
  const verifier = createStandardWebhooksVerifier({
    secrets: ['whsec_' + Buffer.from('x'.repeat(32)).toString('base64')],
  });
  return [
    ['createIdem', () => createIdem({ sql, schema })],
    ['migrate', () => migrate(sql, { schema })],
    ['migrations', () => migrations(schema)],
    ['migrationScript', () => migrationScript(schema)],
    ['createOutbox', () => createOutbox({ schema })],
    ['createInbox', () => createInbox({ sql, schema })],
    [
      'createOutboxDispatcher',
      () => createOutboxDispatcher({ sql, schema, publisher: { name: 'none', publish: async () => [] } }),
    ],
    ['createClaims', () => createClaims({ sql, schema })],
    ['createSagas', () => createSagas({ sql, schema })],
    ['createWebhookReceiver', () => createWebhookReceiver({ sql, schema, sources: { s: verifier } })],
    ['createWebhookProcessor', () => createWebhookProcessor({ sql, schema, handlers: {} })],
    ['createWebhookSender', () => createWebhookSender({ sql, schema })],
    ['createIdemMetrics', () => createIdemMetrics({ sql, schema })],
    [
      'consolePlugin',
      async () => {
        const app = Fastify({ logger: false });
        try {
          await app.register(consolePlugin, { pool: db.pool, schema, host: '127.0.0.1' });
          await app.ready();
        } finally {
          await app.close();
        }
      },
    ],
  ];
}

describe('hostile schema names', () => {
  it('every API refuses them with InvalidArgumentError, before any statement runs', async () => {
    const accepted: string[] = [];
    for (const schema of hostileSchemas) {
      for (const [name, call] of constructors(schema)) {
        let error: unknown;
        try {
          await call();
        } catch (e) {
          error = e;
        }
        // migrate wraps its failures, keeping the refusal as the cause.
        const refusal = (error as { cause?: unknown } | undefined)?.cause ?? error;
        if (!refusesInvalidArgument(error) && !refusesInvalidArgument(refusal))
          accepted.push(`${name}(${JSON.stringify(schema)})`);
      }
    }
    expect(accepted).toEqual([]);
    // Nothing was created or dropped on the way.
    const { rows } = await db.pool.query<{ nspname: string }>(
      `SELECT nspname FROM pg_namespace WHERE nspname = ANY($1)`,
      [hostileSchemas.filter((name) => !name.includes('\u0000'))], // PostgreSQL text holds no NUL
    );
    expect(rows).toEqual([]);
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".canary`)).rows).toEqual([
      { n: 0 },
    ]);
    expect(
      (await db.pool.query(`SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = 'public'`)).rows,
    ).toEqual([{ n: 1 }]);
  });

  it('a valid name is accepted by the same APIs (the refusals above are not blanket)', async () => {
    for (const [name, call] of constructors(db.schema)) {
      await expect(Promise.resolve().then(call), name).resolves.not.toThrow();
    }
  });

  it('the CLI refuses a hostile --schema with an error and a non-zero exit', async () => {
    const result = await run(
      process.execPath,
      ['--import', 'tsx', 'src/cli/main.ts', 'migrate', '--schema', 'idem"; DROP SCHEMA public CASCADE; --'],
      {
        env: { ...process.env, DATABASE_URL: databaseUrl() },
      },
    ).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code: number; stderr: string }) => e,
    );
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(/schema/i);
    expect(
      (await db.pool.query(`SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = 'public'`)).rows,
    ).toEqual([{ n: 1 }]);
  }, 60_000);
});

describe('hostile names in every bound position are data', () => {
  const hostile = [
    `x'; DROP TABLE requests; --`,
    `x"; DROP SCHEMA public CASCADE; --`,
    `$1 OR 1=1`,
    `%`,
    `_`,
    `\\`,
    `ünïcödé 🦄`,
  ];

  it('tenants, operations, keys, consumers, queues and saga names round-trip as text and stay apart', async () => {
    const sql = fromPg(db.pool);
    const idem = createIdem({ sql, schema: db.schema });
    const inbox = createInbox({ sql, schema: db.schema });
    const claims = createClaims({ sql, schema: db.schema });
    const sagas = createSagas({ sql, schema: db.schema });
    for (const name of hostile) {
      const key = `k-${randomUUID()}`; // keys are printable ASCII; their own check is in test/hostile
      const result = await idem.run({ tenant: name, operation: name, key, request: { name } }, async () => ({
        name,
      }));
      expect(result.value).toEqual({ name });
      expect((await idem.get({ tenant: name, operation: name, key }))?.state).toBe('completed');
      // LIKE-style wildcards match nothing else.
      if (name !== '%') expect(await idem.get({ tenant: '%', operation: name, key })).toBeNull();
      expect((await inbox.handle({ consumer: name, messageId: name }, async () => 'ran')).duplicate).toBe(
        false,
      );
      expect((await inbox.handle({ consumer: name, messageId: name }, async () => 'ran')).duplicate).toBe(
        true,
      );
      expect((await claims.enqueue({ tenant: name, queue: name, key, payload: { name } })).created).toBe(
        true,
      );
      const saga = defineSaga({ name: `saga ${name}`, steps: [step({ name, action: async () => name })] });
      expect((await sagas.run(saga, { tenant: name, key, input: null })).value).toEqual({ [name]: name });
    }
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${db.schema}".requests WHERE tenant_id = ANY($1)`,
      [hostile],
    );
    expect(rows[0]!.n).toBe(hostile.length);
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".canary`)).rows).toEqual([
      { n: 0 },
    ]);
  });
});
