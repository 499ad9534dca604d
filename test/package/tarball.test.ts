/**
 * The package as npm publishes it, from its tarball (`npm pack` of the package built by
 * scripts/build.ts, staged in a temporary folder so that the checkout's own dist/ is left alone):
 * - publint and @arethetypeswrong/cli report nothing;
 * - the API reports in etc/api match its declarations (scripts/api-report.ts);
 * - every subpath loads with `require()` on a Node without require(esm), as every Node 20 before
 *   20.19 (`--no-experimental-require-module`), and with `import`; the two builds in one process
 *   agree (error brands, the pipelining symbol, fingerprints) and share one database's work;
 * - a NestJS app laid out as the Nest CLI 11 makes one (test/package/nest-app, CommonJS), with
 *   interface row types, compiles with TypeScript 5.9 and 5.7 (`tsc --noEmit`, the build of
 *   `nest build`, and under the newer template's `module: nodenext`), its Jest e2e test passes, and
 *   its compiled main answers the HTTP contract on Express and on Fastify.
 * - a Lambda-style app of its own (ES modules, `@middy/core` 7 from the registry) runs a Middy
 *   handler of API Gateway v2 events and an SQS batch handler from `idem/lambda` against PostgreSQL.
 * The app's packages come from the npm registry into the temporary folder, pinned in its
 * package.json. About 2–3 minutes on 2 cores, most of it `npm install` (see `timings` below).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { formatMessage } from 'publint/utils';
import { publint } from 'publint';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { databaseUrl } from '../support/database.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'idem-tarball-'));
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  files: string[];
  exports: Record<string, unknown>;
};
const subpaths = Object.keys(manifest.exports).map((s) => (s === '.' ? 'idem' : `idem/${s.slice(2)}`));
const schema = `idem_package_${randomBytes(4).toString('hex')}`;
const timings: Record<string, string> = {};

interface Run {
  code: number | null;
  stdout: string;
  /** stdout and stderr, for a failure's message. */
  output: string;
}

/**
 * The environment of every command run here: no `npm_*` variables of the `npm test` that runs
 * vitest (npm would take `npm_config_*` as its own configuration, the checkout's prefix among
 * them), no NODE_OPTIONS.
 */
function environment(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!/^npm_/i.test(name) && name !== 'NODE_OPTIONS') env[name] = value;
  }
  return { ...env, ...extra };
}

function run(command: string, args: string[], cwd: string, extra: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      command,
      args,
      { cwd, env: environment(extra), maxBuffer: 64 * 1024 * 1024, timeout: 600_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, output: `${stdout}${stderr}` });
      },
    );
  });
}

/** Runs the command; throws with its output when it fails. Returns its output. */
async function ok(command: string, args: string[], cwd: string, extra: Record<string, string> = {}) {
  const result = await run(command, args, cwd, extra);
  if (result.code !== 0) {
    throw new Error(
      `${[command, ...args].join(' ')} (in ${cwd}) exited with ${result.code}:\n${result.output}`,
    );
  }
  return result.stdout;
}

async function timed<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const started = performance.now();
  try {
    return await fn();
  } finally {
    timings[name] = `${((performance.now() - started) / 1000).toFixed(0)} s`;
  }
}

/**
 * Node's flag that turns require(esm) off, where this Node has it (20.19+, 22.12+): the CommonJS
 * build must load as on a Node 20 before 20.19. Older Node has no require(esm) to turn off.
 */
const withoutRequireEsm = process.allowedNodeEnvironmentFlags.has('--no-experimental-require-module')
  ? ['--no-experimental-require-module']
  : [];

/** npm pack of the package as it is published: what `files` names, package.json, README. */
async function pack(): Promise<string> {
  const stage = join(work, 'stage');
  mkdirSync(stage);
  await ok(process.execPath, ['--import', 'tsx', 'scripts/build.ts', '--out', join(stage, 'dist')], root);
  for (const entry of manifest.files.filter((f) => f !== 'dist')) {
    cpSync(join(root, entry), join(stage, entry), { recursive: true });
  }
  for (const file of readdirSync(root).filter((f) => /^(package\.json|readme|license|licence)/i.test(f))) {
    cpSync(join(root, file), join(stage, file));
  }
  const packed = await ok('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', work], stage);
  return join(work, (JSON.parse(packed) as { filename: string }[])[0]!.filename);
}

let tarball = '';
const app = join(work, 'app');

beforeAll(async () => {
  tarball = await timed('build and pack', pack);
  const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
  await pool.query(`CREATE SCHEMA "${schema}"`);
  await pool.end();
}, 300_000);

afterAll(async () => {
  const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
  rmSync(work, { recursive: true, force: true });
  console.log(
    `[package] ${Object.entries(timings)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
  );
});

describe('the tarball', () => {
  it('publint reports nothing (suggestions included)', async () => {
    const data = readFileSync(tarball);
    const { messages, pkg } = await publint({
      pack: { tarball: data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength) },
      level: 'suggestion',
      strict: true,
    });
    expect(messages.map((m) => `${m.type}: ${formatMessage(m, pkg, { color: false })}`)).toEqual([]);
  });

  it('@arethetypeswrong/cli reports nothing (node10, node16 from CJS and ESM, bundler)', async () => {
    const attw = join(root, 'node_modules', '@arethetypeswrong', 'cli', 'dist', 'index.js');
    const result = await run(process.execPath, [attw, tarball, '--format', 'json'], work);
    const report = JSON.parse(result.stdout) as { problems: object };
    expect(report.problems).toEqual({});
    expect(result.code).toBe(0);
  });

  it('its declarations match the API reports in etc/api (else: npm run api:update)', async () => {
    const extracted = join(work, 'extracted');
    mkdirSync(extracted);
    await ok('tar', ['xzf', tarball, '-C', extracted], work);
    // The declarations import their dependencies' types (pg, @nestjs/common, …): the checkout's.
    symlinkSync(join(root, 'node_modules'), join(extracted, 'package', 'node_modules'), 'dir');
    const result = await timed('API reports', () =>
      run(
        process.execPath,
        ['--import', 'tsx', 'scripts/api-report.ts', '--package', join(extracted, 'package')],
        root,
      ),
    );
    expect(result.code, result.output).toBe(0);
  });

  it('holds both builds of every subpath, migrations/ and the console assets, and no -cjs sources', async () => {
    const listing = await ok('tar', ['tzf', tarball], work);
    const files = listing.split('\n');
    for (const subpath of Object.values(manifest.exports) as {
      import: { default: string };
      require: { default: string };
    }[]) {
      expect(files).toContain(`package/${subpath.import.default.slice(2)}`);
      expect(files).toContain(`package/${subpath.require.default.slice(2)}`);
    }
    expect(files).toContain('package/dist/cjs/package.json');
    expect(files.filter((f) => f.startsWith('package/migrations/')).length).toBeGreaterThan(0);
    expect(files).toContain('package/src/console/assets/index.html');
    expect(files.some((f) => f.endsWith('-cjs.js'))).toBe(false);
  });
});

describe('installed in an app', () => {
  beforeAll(async () => {
    cpSync(join(root, 'test', 'package', 'nest-app'), app, { recursive: true });
    cpSync(tarball, join(app, 'idem.tgz'));
    await timed('npm install', () =>
      ok('npm', ['install', '--no-audit', '--no-fund', '--no-package-lock', '--loglevel=error'], app),
    );
  }, 600_000);

  const env = () => ({ DATABASE_URL: databaseUrl(), APP_SCHEMA: schema });

  it('every subpath loads with require() on a Node without require(esm)', async () => {
    const script = `
      const assert = require('node:assert/strict');
      for (const subpath of ${JSON.stringify(subpaths)}) {
        const loaded = require(subpath);
        assert.ok(Object.keys(loaded).length > 0, subpath + ' exports nothing');
      }
      // Files found from the package root: migrations/ beside dist/cjs.
      assert.equal(require('idem').migrations().length, ${readdirSync(join(root, 'migrations')).filter((f) => f.endsWith('.sql')).length});
      console.log('loaded ' + ${subpaths.length} + ' subpaths');
    `;
    const output = await ok(process.execPath, [...withoutRequireEsm, '-e', script], app);
    expect(output).toContain(`loaded ${subpaths.length} subpaths`);
  });

  it('every subpath loads with import', async () => {
    const script = `
      for (const subpath of ${JSON.stringify(subpaths)}) await import(subpath);
      const { migrations } = await import('idem');
      console.log('imported ${subpaths.length} subpaths, ' + migrations().length + ' migrations');
    `;
    const output = await ok(process.execPath, ['--input-type=module', '-e', script], app);
    expect(output).toContain(`imported ${subpaths.length} subpaths`);
  });

  it('its two builds in one process agree: errors, fingerprints, the pipelining symbol, one key', async () => {
    // An ESM module that also require()s the CommonJS build: two copies of every module.
    writeFileSync(
      join(app, 'two-copies.mjs'),
      `
      import assert from 'node:assert/strict';
      import { createRequire } from 'node:module';
      import pg from 'pg';
      import * as esm from 'idem';
      const require = createRequire(import.meta.url);
      const cjs = require('idem');
      const cjsPg = require('idem/pg');
      assert.notEqual(esm.IdemError, cjs.IdemError, 'two copies');
      for (const [thrower, guard] of [[esm, cjs], [cjs, esm]]) {
        assert.throws(() => thrower.validateKey(''), (error) => guard.isIdemError(error) && error.code === 'IDEM_INVALID_KEY');
      }
      const value = { b: [1, 2.5, 1e21, 'é\\u2028', null, true], a: { z: -0, y: 'x' }, c: undefined };
      assert.equal(cjs.fingerprint(value), esm.fingerprint(value));

      const schema = process.env.APP_SCHEMA;
      const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
      const sql = cjsPg.fromPg(pool);
      await esm.migrate(sql, { schema });
      const idem = esm.createIdem({ sql, schema });
      const spec = { tenant: 'acme', operation: 'two-copies', key: 'k-' + Date.now(), request: { n: 1 } };
      let runs = 0;
      const first = await idem.run(spec, async (tx) => { runs++; await tx.query('SELECT 1'); return { n: 1 }; });
      const retry = await idem.run(spec, async () => { runs++; return { n: 2 }; });
      assert.equal(runs, 1);
      assert.equal(first.replayed, false);
      assert.equal(retry.replayed, true);
      assert.deepEqual(retry.value, { n: 1 });
      await pool.end();

      // node-postgres in pipeline mode: the CommonJS adapter's transaction carries the registry
      // symbol the ESM core looks for (Symbol.for), so it keeps sending its last statement with COMMIT.
      const pipelined = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 1, pipeline: true });
      await cjsPg.fromPg(pipelined).transaction(async (tx) => {
        assert.equal(typeof tx[Symbol.for('idem.queryAndCommit')], 'function');
      });
      await pipelined.end();
      console.log('two copies agree');
      `,
    );
    const output = await ok(process.execPath, [...withoutRequireEsm, 'two-copies.mjs'], app, env());
    expect(output).toContain('two copies agree');
  });

  it("type-checks with TypeScript 5.0, the oldest 5.x; idem's declarations need no skipLibCheck there", async () => {
    writeTypeScript50Configs();
    const tsc50 = join(app, 'node_modules', 'typescript-5.0', 'bin', 'tsc');
    await timed('tsc 5.0.4', async () => {
      await ok(process.execPath, [tsc50, '-p', 'tsconfig.ts50.json'], app);
      await ok(process.execPath, [tsc50, '-p', 'tsconfig.ts50-nodenext.json'], app);
      // Other packages' declarations (@types/node, fastify, pg-protocol) need a newer TypeScript.
      const strict = await run(
        process.execPath,
        [tsc50, '-p', 'tsconfig.ts50.json', '--skipLibCheck', 'false'],
        app,
      );
      const inIdem = strict.output.split('\n').filter((line) => line.includes('node_modules/idem/'));
      expect(inIdem).toEqual([]);
    });
  }, 180_000);

  describe.each([
    { typescript: '5.9.3', folder: 'typescript' },
    { typescript: '5.7.3', folder: 'typescript-5.7' },
  ])('the NestJS app (CommonJS) with TypeScript $typescript', ({ typescript, folder }) => {
    const tsc = (...args: string[]) =>
      ok(process.execPath, [join(app, 'node_modules/typescript/bin/tsc'), ...args], app);

    beforeAll(() => {
      // The app's `typescript` is this version: what ts-jest and `tsc` load.
      const installed = join(app, 'node_modules', 'typescript');
      if (folder !== 'typescript') {
        renameSync(installed, join(app, 'node_modules', 'typescript-default'));
        renameSync(join(app, 'node_modules', folder), installed);
      }
      const { version } = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as {
        version: string;
      };
      expect(version).toBe(typescript);
    });

    it('compiles: tsc --noEmit (module commonjs), the nest build (tsconfig.build.json), module nodenext', async () => {
      await timed(`tsc ${typescript}`, async () => {
        await tsc('-p', 'tsconfig.json', '--noEmit');
        // The newer Nest CLI 11 template's options: require() of idem resolved through its exports.
        await tsc('-p', 'tsconfig.nodenext.json');
        rmSync(join(app, 'dist'), { recursive: true, force: true });
        await tsc('-p', 'tsconfig.build.json');
      });
      expect(existsSync(join(app, 'dist', 'main.js'))).toBe(true);
    }, 180_000);

    it('its Jest e2e test passes (Jest 30, ts-jest), on Express and Fastify', async () => {
      const result = await timed(`jest ${typescript}`, () =>
        run(
          process.execPath,
          [
            join(app, 'node_modules/jest/bin/jest.js'),
            '--config',
            './test/jest-e2e.json',
            '--cacheDirectory',
            join(app, '.jest-cache'),
            '--ci',
          ],
          app,
          env(),
        ),
      );
      // Jest reports on stderr.
      const output = result.output;
      expect(result.code, output).toBe(0);
      expect(output).toMatch(/Tests:\s+4 passed, 4 total/);
      expect(output).toContain('OrdersController (e2e, express)');
      expect(output).toContain('OrdersController (e2e, fastify)');
    }, 180_000);

    it.each(['express', 'fastify'])(
      'its compiled main (node dist/main, no require(esm)) answers the contract on %s',
      async (platform) => {
        const server = await start(platform);
        try {
          const key = `main-${platform}-${typescript}-${randomBytes(3).toString('hex')}`;
          const send = (total: number) =>
            fetch(`${server.url}/orders`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', 'idempotency-key': key },
              body: JSON.stringify({ total, note: key }),
            });
          const first = await send(40);
          const firstBody = await first.text();
          expect(first.status, firstBody).toBe(201);
          const retry = await send(40);
          expect(retry.status).toBe(201);
          expect(retry.headers.get('idempotent-replayed')).toBe('true');
          expect(await retry.text()).toBe(firstBody);
          const other = await send(41);
          expect(other.status).toBe(422);
          expect(other.headers.get('content-type')).toMatch(/^application\/problem\+json/);
          const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 });
          const { rows } = await pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM "${schema}".orders WHERE note = $1`,
            [key],
          );
          await pool.end();
          expect(rows[0]!.n).toBe(1);
        } finally {
          await server.stop();
        }
      },
    );
  });
});

describe('idem/lambda with Middy, in a Lambda-style app of its own', () => {
  const lambdaApp = join(work, 'lambda-app');

  beforeAll(async () => {
    mkdirSync(lambdaApp);
    // @middy/core 7 declares node >= 22; it runs on this Node 20 (npm only warns).
    const packageJson = {
      name: 'lambda-app',
      private: true,
      type: 'module',
      dependencies: { idem: `file:${tarball}`, pg: '8.23.1', '@middy/core': '7.9.2' },
    };
    writeFileSync(join(lambdaApp, 'package.json'), JSON.stringify(packageJson, null, 2));
    await timed('npm install (lambda app)', () =>
      ok('npm', ['install', '--no-audit', '--no-fund', '--no-package-lock', '--loglevel=error'], lambdaApp),
    );
  }, 600_000);

  it('a Middy handler of API Gateway v2 events and an SQS batch handler hold the contract', async () => {
    writeFileSync(
      join(lambdaApp, 'handler.mjs'),
      `
      import assert from 'node:assert/strict';
      import middy from '@middy/core';
      import pg from 'pg';
      import { createIdem, migrate } from 'idem';
      import { createInbox } from 'idem/inbox';
      import { createSqsBatchHandler, idempotency } from 'idem/lambda';
      import { fromPg } from 'idem/pg';

      // Once per container, outside the handlers.
      const schema = process.env.APP_SCHEMA;
      const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 1 });
      const sql = fromPg(pool, { prepare: false });
      await migrate(sql, { schema });
      await pool.query(\`CREATE TABLE IF NOT EXISTS "\${schema}".lambda_effects (key text NOT NULL)\`);
      const idem = createIdem({ sql, schema });
      const write = (tx, key) => tx.query(\`INSERT INTO "\${schema}".lambda_effects (key) VALUES ($1)\`, [key]);
      const effects = async (key) =>
        (await pool.query(\`SELECT count(*)::int AS n FROM "\${schema}".lambda_effects WHERE key = $1\`, [key])).rows[0].n;

      const handler = middy(async (event, context) => {
        await write(context.idem.tx, context.idem.key);
        return { statusCode: 201, headers: { 'content-type': 'application/json' }, body: event.body };
      }).use(idempotency({ idem, singleTenant: true }));
      const context = { functionName: 'orders', getRemainingTimeInMillis: () => 30_000 };
      const key = 'lambda-' + Date.now();
      const event = (body) => ({
        version: '2.0', routeKey: 'POST /orders', rawPath: '/orders', rawQueryString: '',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        requestContext: { http: { method: 'POST', path: '/orders' }, requestId: String(Math.random()) },
        body: JSON.stringify(body), isBase64Encoded: false,
      });
      const first = await handler(event({ total: 40 }), { ...context });
      const retry = await handler(event({ total: 40 }), { ...context });
      assert.equal(first.statusCode, 201);
      assert.equal(retry.headers['idempotent-replayed'], 'true');
      assert.equal(retry.body, first.body);
      assert.equal((await handler(event({ total: 41 }), { ...context })).statusCode, 422);
      assert.equal(await effects(key), 1);

      const sqs = createSqsBatchHandler({
        inbox: createInbox({ sql, schema }),
        consumer: 'billing',
        events: { emit() {}, on: () => () => {}, off() {}, has: () => true },
        handler: async (tx, record) => {
          if (record.body === 'fail') throw new Error('declined');
          await write(tx, record.messageId);
        },
      });
      const record = (messageId, body = 'ok') => ({ messageId, body, eventSource: 'aws:sqs' });
      const batch = { Records: [record(key + '-a'), record(key + '-a'), record(key + '-b', 'fail')] };
      assert.deepEqual(await sqs(batch, context), { batchItemFailures: [{ itemIdentifier: key + '-b' }] });
      assert.deepEqual(await sqs(batch, context), { batchItemFailures: [{ itemIdentifier: key + '-b' }] });
      assert.equal(await effects(key + '-a'), 1);
      await pool.end();
      console.log('lambda handlers hold');
      `,
    );
    const output = await ok(process.execPath, ['handler.mjs'], lambdaApp, {
      DATABASE_URL: databaseUrl(),
      APP_SCHEMA: schema,
    });
    expect(output).toContain('lambda handlers hold');
  });
});

/** The app's tsconfig files as TypeScript 5.0 reads them: it has no `ES2023` target. */
function writeTypeScript50Configs(): void {
  const read = (name: string) =>
    JSON.parse(readFileSync(join(app, name), 'utf8')) as { compilerOptions: Record<string, unknown> };
  const base = read('tsconfig.json');
  const options = { ...base.compilerOptions, target: 'ES2022', incremental: false, noEmit: true };
  writeFileSync(join(app, 'tsconfig.ts50.json'), JSON.stringify({ compilerOptions: options }));
  writeFileSync(
    join(app, 'tsconfig.ts50-nodenext.json'),
    JSON.stringify({
      compilerOptions: { ...options, ...read('tsconfig.nodenext.json').compilerOptions },
      exclude: ['node_modules', 'test', 'dist', '**/*spec.ts'],
    }),
  );
}

/** Starts the app's compiled main on a free port; resolves with its URL once it listens. */
function start(platform: string): Promise<{ url: string; stop(): Promise<void> }> {
  return new Promise((resolve, reject) => {
    const child: ChildProcess = spawn(process.execPath, [...withoutRequireEsm, 'dist/main.js'], {
      cwd: app,
      env: environment({ DATABASE_URL: databaseUrl(), APP_SCHEMA: schema, PORT: '0', PLATFORM: platform }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const stop = () =>
      new Promise<void>((done) => {
        if (child.exitCode !== null) return done();
        child.once('exit', () => done());
        child.kill('SIGTERM');
      });
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /listening on (http:\/\/\S+)/.exec(output);
      if (match) resolve({ url: match[1]!, stop });
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`dist/main.js exited with ${code}:\n${output}`)));
    setTimeout(
      () => reject(new Error(`dist/main.js did not listen within 30 s:\n${output}`)),
      30_000,
    ).unref();
  });
}
