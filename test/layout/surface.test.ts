/**
 * The public surface follows one grammar (docs/reference/conventions.md), checked on every subpath
 * of package.json's `exports`, loaded from src/ as a user's import resolves them:
 * - parts are made by `createX(options)` and start nothing: a factory opens no connection, timer
 *   or socket, and what runs has `start()` and `stop()`;
 * - exported values are factories (`createX`), definitions (`defineX`), adapters (`fromX`), guards
 *   (`isX`), or a named helper from the list below: a bare noun that makes an object fails;
 * - classes are exported as types only, but errors: every error class has its guard beside it;
 * - each value is exported from exactly one subpath;
 * - no deprecated alias is left (`@deprecated` anywhere in src/);
 * - every error code is in `idemErrorCodes`;
 * - each framework's subpath exports both its idempotency middleware and its webhook receiver;
 * - modules report through the `events` channel only: no logger, `onX` callback or `counters`.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { idemErrorCodes, isIdemError, type Row, type Sql, type Transaction } from 'idem';
import { problemKinds } from 'idem/http';

/** The options of a query (`Sql.query`'s third parameter). */
type QueryOptions = Parameters<Sql['query']>[2];

const root = fileURLToPath(new URL('../../', import.meta.url));
type Target = string | { import?: Target; default?: Target; [condition: string]: Target | undefined };
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  exports: Record<string, Target>;
};

/** The built file an ESM import of a subpath loads (whatever the shape of its conditions). */
function esmFile(target: Target | undefined): string {
  if (typeof target === 'string') return target;
  if (!target) throw new Error('a subpath without a target');
  return esmFile(target.import ?? target.default);
}

/** Every subpath's runtime exports, loaded from src/. */
async function subpaths(): Promise<Map<string, Record<string, unknown>>> {
  const loaded = new Map<string, Record<string, unknown>>();
  for (const [subpath, target] of Object.entries(manifest.exports)) {
    const file = esmFile(target)
      .replace(/^\.\/dist\/(?:esm\/|cjs\/)?/, '../../src/')
      .replace(/\.js$/, '.ts');
    loaded.set(
      subpath === '.' ? 'idem' : `idem/${subpath.slice(2)}`,
      (await import(file)) as Record<string, unknown>,
    );
  }
  return loaded;
}

const isClass = (value: unknown) =>
  typeof value === 'function' && /^class\b/.test(Function.prototype.toString.call(value));
const isErrorClass = (value: unknown) =>
  isClass(value) && (value as { prototype: unknown }).prototype instanceof Error;

/**
 * Exported functions that are neither factories, definitions, adapters nor guards: pure helpers
 * (they compute and return a value; none makes an object that holds state or runs). A new bare
 * noun that makes one is a `createX`.
 */
const helpers = new Set([
  // idem
  'classifyFailure',
  'completed',
  'refused',
  'decideIntent',
  'deriveKey',
  'fingerprint',
  'migrate',
  'migrations',
  'migrationScript',
  'onBehalfOf',
  'quoteSchema',
  'sqlStateOf',
  'validateKey',
  // idem/pg
  'primaryClient',
  'splitMultiHostUrl',
  // idem/http
  'defaultStore',
  'httpAnswer',
  'parseBody',
  'parseIdempotencyKey',
  'problemResponse',
  'readNodeBody',
  'readWebBody',
  'requestFingerprint',
  'restoreResponse',
  // framework subpaths: each framework's own idiom (a middleware, a plugin, a handler)
  'idempotency',
  'webhooks',
  'webhookHandler',
  // idem/nestjs: decorators and NestJS's own classes (modules, interceptors, filters)
  'IdemContext',
  'IdemTransaction',
  'Idempotent',
  // idem/outbox
  'describeError',
  'outboxChannel',
  // idem/webhooks
  'decodeStandardPublicKey',
  'decodeStandardSecret',
  'fetchHeaders',
  'generateWebhookKeyPair',
  'generateWebhookSecret',
  'nodeHeaders',
  'normaliseEntity',
  'parseSigningSecret',
  'recordHeaders',
  'refusedKind',
  'safeEqual',
  'signatureHeader',
  // idem/workflow
  'activityKey',
  'activityScope',
  'runActivity',
  'runActivityCall',
  'runActivitySteps',
  'step',
  'stepKeys',
  // idem/claims
  'taskKey',
  'taskScope',
  // idem/client
  'assertOk',
  'classifyError',
  'classifyResponse',
  'currentIdempotencyKey',
  'parseRetryAfter',
  'resolveBackoff',
  'retry',
  'subKey',
  'withIdempotencyKey',
  // idem/testing
  'parseCount',
  'renderJson',
  'renderTable',
  'resolveDrillOptions',
  'runDrills',
  'streamProgress',
  // idem/console
  'consolePlugin',
]);

/** NestJS's integration is made of classes, as NestJS wants (modules, interceptors, filters). */
const frameworkClasses = new Set([
  'IdemModule',
  'IdempotencyInterceptor',
  'IdempotencyBodyFilter',
  'TransactionalAdapterIdem',
]);

describe('the public surface', () => {
  it('exports factories, definitions, adapters, guards and named helpers only', async () => {
    const offenders: string[] = [];
    for (const [subpath, exports] of await subpaths()) {
      for (const [name, value] of Object.entries(exports)) {
        if (typeof value !== 'function' || isClass(value)) continue;
        if (/^(create|define|from|is)[A-Z]/.test(name) || helpers.has(name)) continue;
        offenders.push(`${subpath}: ${name}`);
      }
    }
    expect(offenders, 'a bare-noun function: make it createX(options), or list it as a helper').toEqual([]);
  });

  it('exports classes as types only, errors excepted, and every error class has its guard', async () => {
    const offenders: string[] = [];
    for (const [subpath, exports] of await subpaths()) {
      for (const [name, value] of Object.entries(exports)) {
        if (!isClass(value) || frameworkClasses.has(name)) continue;
        if (!isErrorClass(value)) {
          offenders.push(`${subpath}: class ${name} (export its type and a createX)`);
          continue;
        }
        const base = name.replace(/Error$/, '');
        const guard =
          exports[`is${base}`] ??
          exports[`is${name}`] ??
          (name === 'IdemError' ? exports.isIdemError : undefined);
        if (typeof guard !== 'function') offenders.push(`${subpath}: ${name} has no guard is${base}`);
      }
    }
    expect(offenders).toEqual([]);
  });

  it('exports each value from exactly one subpath', async () => {
    const where = new Map<unknown, string[]>();
    for (const [subpath, exports] of await subpaths()) {
      for (const [name, value] of Object.entries(exports)) {
        if (typeof value !== 'function' && (typeof value !== 'object' || value === null)) continue;
        where.set(value, [...(where.get(value) ?? []), `${subpath}.${name}`]);
      }
    }
    const twice = [...where.values()].filter((places) => places.length > 1).map((p) => p.join(' = '));
    expect(twice).toEqual([]);
  });

  it('each framework subpath exports its idempotency middleware and its webhook receiver', async () => {
    const loaded = await subpaths();
    for (const framework of ['idem/express', 'idem/fastify', 'idem/hono', 'idem/node-http']) {
      expect(typeof loaded.get(framework)?.idempotency, framework).toBe('function');
      expect(typeof loaded.get(framework)?.webhooks, framework).toBe('function');
    }
  });

  it('reports through the event channel only: no logger, onX callback or counters in any options or class', () => {
    // Internal plumbing, not reachable from a subpath: the polling kernel's and the console
    // feed's error hooks, which their owners wire to `events`, and the dispatcher's LISTEN
    // connection, whose hooks wake it.
    const internal = new Set([
      'src/core/worker/polling-worker.ts',
      'src/console/live.ts',
      'src/outbox/listener.ts',
      // The dispatcher's batch context: its hooks are the dispatcher's own, wired to `events`.
      'src/outbox/batch.ts',
      // Middy's middleware shape ({ before, after, onError }), which idem/lambda implements.
      'src/lambda/types.ts',
    ]);
    const files = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
      );
    const hooks: string[] = [];
    for (const file of files(join(root, 'src'))) {
      const path = file.slice(root.length);
      if (internal.has(path)) continue;
      const text = readFileSync(file, 'utf8');
      for (const block of text.matchAll(/export (?:interface|class) (\w+)[^{]*\{([\s\S]*?)\n\}/g)) {
        for (const member of block[2]!.matchAll(/^ {2}(?:readonly )?(on[A-Z]\w*|logger|counters)\??:/gm)) {
          hooks.push(`${path}: ${block[1]}.${member[1]}`);
        }
      }
    }
    expect(hooks).toEqual([]);
  });

  it('keeps no deprecated alias', () => {
    const files = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
      );
    const deprecated = files(join(root, 'src')).filter((file) =>
      readFileSync(file, 'utf8').includes('@deprecated'),
    );
    expect(deprecated.map((f) => f.slice(root.length))).toEqual([]);
  });

  it('puts every error and problem code in idemErrorCodes', async () => {
    const codes = new Set<string>(idemErrorCodes);
    for (const kind of Object.values(problemKinds)) expect(codes.has(kind.code), kind.code).toBe(true);
    // Every exported error class, made without arguments where it can be, carries a listed code.
    for (const [subpath, exports] of await subpaths()) {
      for (const [name, value] of Object.entries(exports)) {
        if (!isErrorClass(value) || name === 'IdemError') continue; // the base takes any code
        let instance: unknown;
        try {
          instance = new (value as new (...args: unknown[]) => unknown)('x', 'y');
        } catch {
          continue; // needs real arguments
        }
        if (isIdemError(instance))
          expect(codes.has(instance.code), `${subpath}: ${name} ${instance.code}`).toBe(true);
      }
    }
  });

  it('factories start nothing: no connection, timer or socket until start()', async () => {
    const pool = new pg.Pool({ connectionString: 'postgres://nobody@127.0.0.1:1/none', max: 1 });
    let queried = 0;
    const base = fromPg(pool);
    const sql: Sql<pg.PoolClient> = {
      query<R extends Row>(text: string, params?: readonly unknown[], options?: QueryOptions) {
        queried++;
        return base.query<R>(text, params, options);
      },
      transaction<T>(fn: (tx: Transaction<pg.PoolClient>) => Promise<T>) {
        queried++;
        return base.transaction(fn);
      },
    };
    const { createIdem, createCompleter } = await import('idem');
    const {
      createOutbox,
      createOutboxDispatcher,
      createInDatabasePublisher,
      createRabbitMqPublisher,
      createNatsPublisher,
    } = await import('idem/outbox');
    const { createInbox, createRabbitMqConsumer, createJetStreamConsumer } = await import('idem/inbox');
    const { createClaims, createClaimsWorker, createKeepAlive } = await import('idem/claims');
    const {
      createWebhookReceiver,
      createWebhookProcessor,
      createWebhookSender,
      createStandardWebhooksVerifier,
    } = await import('idem/webhooks');
    const { createSagas } = await import('idem/workflow');
    const { createResilientClient } = await import('idem/client');
    const { createIdemMetrics } = await import('idem/metrics');
    const before = process.getActiveResourcesInfo().length;
    const idem = createIdem({ sql });
    const inbox = createInbox({ sql });
    const claims = createClaims({ sql });
    const made: Record<string, object> = {
      idem,
      completer: createCompleter({ idem }),
      outbox: createOutbox({ sql }),
      dispatcher: createOutboxDispatcher({
        sql,
        publisher: createInDatabasePublisher({ inbox, subscribers: [] }),
        listen: 'postgres://nobody@127.0.0.1:1/none',
      }),
      rabbitMqPublisher: createRabbitMqPublisher({ connection: 'amqp://127.0.0.1:1' }),
      natsPublisher: createNatsPublisher({ connection: { servers: '127.0.0.1:1' } }),
      inbox,
      rabbitMqConsumer: createRabbitMqConsumer({
        inbox,
        consumer: 'c',
        queue: 'q',
        connection: 'amqp://127.0.0.1:1',
        handler: async () => undefined,
      }),
      jetStreamConsumer: createJetStreamConsumer({
        inbox,
        consumer: 'c',
        connection: { servers: '127.0.0.1:1' },
        stream: 's',
        durable: 'd',
        handler: async () => undefined,
      }),
      claims,
      claimsWorker: createClaimsWorker({ claims, queue: 'q', handler: async () => undefined }),
      keepAlive: createKeepAlive({
        claims,
        task: { id: 'x', tenant: 't', queue: 'q', key: 'k', fence: 1, attempt: 1, payload: null } as never,
      }),
      receiver: createWebhookReceiver({
        sql,
        sources: {
          s: createStandardWebhooksVerifier({ secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'] }),
        },
      }),
      processor: createWebhookProcessor({ sql, handlers: {} }),
      sender: createWebhookSender({ sql }),
      sagas: createSagas({ sql }),
      client: createResilientClient({}),
      metrics: createIdemMetrics({}),
    };
    await new Promise((resolve) => setImmediate(resolve));
    expect(queried, 'a factory ran a statement').toBe(0);
    expect(process.getActiveResourcesInfo().length, 'a factory opened a handle').toBeLessThanOrEqual(before);
    for (const [name, part] of Object.entries(made)) {
      const runs = typeof (part as { start?: unknown }).start === 'function';
      if (runs)
        expect(typeof (part as { stop?: unknown }).stop, `${name} has start() but no stop()`).toBe(
          'function',
        );
    }
    await pool.end();
  });
});
