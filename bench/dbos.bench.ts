/**
 * idem side by side with DBOS Transact 5.3 (`@dbos-inc/dbos-sdk`) on the same three-step flow: a
 * local write (INSERT one business row in a transaction), a provider call (a real local HTTP server
 * that answers after 5 ms, the same function on both sides), a local write (a second INSERT in a
 * transaction). idem: `idem.steps` with `op.step`, `op.call`, `op.step`, keyed by the idempotency
 * key. DBOS: a workflow whose id is the idempotency key, the local writes as DBOS transactions on a
 * node-postgres data source, the call as a DBOS step. Closed loop at c=16 and c=64, alternating
 * rounds, median kept; then replays (the same key, or workflow id, again) and statements per intent.
 *
 * DBOS 5.3's own node-postgres data source package is not on the registry, and the 4.x data source
 * packages that are (knex, drizzle, postgres.js) import helpers 5.3 no longer exports; so the data
 * source here is a minimal one written to 5.3's `DataSourceTransactionHandler` contract, doing what
 * the published ones do: read the step's completion row, BEGIN, the user's statements, INSERT the
 * completion row, check the workflow's owner (`assertStillOwnsWorkflow`), COMMIT. It leaves out the
 * optional `deleteCheckpoints` (completion-time cleanup), which only saves DBOS statements.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { createServer } from 'node:http';
import { DBOS } from '@dbos-inc/dbos-sdk';
import {
  assertStillOwnsWorkflow,
  DBOSStepAlreadyRecordedError,
  migrateDataSourcePG,
  registerDataSource,
  replayRecordedStep,
  runTransaction,
  type DataSourceTransactionHandler,
} from '@dbos-inc/dbos-sdk/datasource';
import pg from 'pg';
import { fromPg } from '../src/adapters/pg.js';
import { migrate } from '../src/migrate/migrate.js';
import { createIdem } from '../src/operations/idem.js';
import { closedLoop, round, sideBySide, type LoadResult } from './lib/measure.js';
import { listenOnLoopback } from './lib/loopback.js';
import type { BenchContext, BenchFigure, BenchSection } from './lib/types.js';

const callMs = 5;
/** Connections per side: idem's one pool; DBOS's system-database pool plus its data source pool. */
const perSide = 32;

/** Counts every statement a pool's clients send (pool.query goes through client.query too). */
function countingPool(config: pg.PoolConfig): { pool: pg.Pool; count: { statements: number } } {
  const count = { statements: 0 };
  const pool = new pg.Pool(config);
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (...args: unknown[]) => {
      count.statements++;
      return query(...args);
    };
  });
  return { pool, count };
}

/** A node-postgres data source to DBOS 5.3's contract: transactions checkpointed in their own commit. */
class PgDataSource implements DataSourceTransactionHandler {
  readonly #clients = new AsyncLocalStorage<pg.PoolClient>();
  constructor(
    readonly name: string,
    private readonly pool: pg.Pool,
    private readonly schema: string,
  ) {
    registerDataSource(this);
  }

  async initialize(): Promise<void> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      await migrateDataSourcePG(
        async (sql) => (await client.query(sql)).rows as Record<string, unknown>[],
        this.schema,
      );
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK');
      throw error;
    } finally {
      client.release();
    }
  }

  async destroy(): Promise<void> {}

  /** The transaction's client, inside `runTransaction`. */
  get client(): pg.PoolClient {
    const client = this.#clients.getStore();
    if (!client) throw new Error('PgDataSource.client outside a transaction');
    return client;
  }

  runTransaction<T>(callback: () => Promise<T>, name: string): Promise<T> {
    return runTransaction(callback, name, { dsName: this.name });
  }

  async #recorded(workflowID: string, stepID: number) {
    const { rows } = await this.pool.query<{ output: string | null; error: string | null }>(
      `SELECT output, error FROM "${this.schema}".transaction_completion WHERE workflow_id = $1 AND function_num = $2`,
      [workflowID, stepID],
    );
    return rows[0];
  }

  async invokeTransactionFunction<This, Args extends unknown[], Return>(
    _config: unknown,
    target: This,
    func: (this: This, ...args: Args) => Promise<Return>,
    ...args: Args
  ): Promise<Return> {
    const workflowID = DBOS.workflowID;
    const stepID = DBOS.stepID;
    const checkpointed = workflowID !== undefined && stepID !== undefined;
    if (checkpointed) {
      const recorded = await this.#recorded(workflowID, stepID);
      if (recorded) return replayRecordedStep<Return>(recorded);
    }
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      const result = await this.#clients.run(client, () => func.call(target, ...args));
      if (checkpointed) {
        const { rows } = await client.query(
          `INSERT INTO "${this.schema}".transaction_completion (workflow_id, function_num, output) VALUES ($1, $2, $3)
           ON CONFLICT (workflow_id, function_num) DO NOTHING RETURNING workflow_id`,
          // SuperJSON's envelope for a plain JSON value, which replayRecordedStep parses.
          [workflowID, stepID, JSON.stringify({ json: result ?? null })],
        );
        if (rows.length === 0) throw new DBOSStepAlreadyRecordedError(workflowID, stepID);
        await assertStillOwnsWorkflow(workflowID);
      }
      await client.query('COMMIT');
      return result;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      if (checkpointed && error instanceof DBOSStepAlreadyRecordedError) {
        const recorded = await this.#recorded(workflowID, stepID);
        if (recorded) return replayRecordedStep<Return>(recorded);
      }
      throw error;
    } finally {
      client.release();
    }
  }
}

/** The provider: answers every POST after `latencyMs`, over keep-alive HTTP/1.1. */
async function startProvider(latencyMs: number): Promise<{ url: string; close(): Promise<void> }> {
  let charges = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      setTimeout(() => {
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ id: `ch_${++charges}`, key: req.headers['idempotency-key'] }));
      }, latencyMs);
    });
  });
  return listenOnLoopback(server);
}

export default async function dbosBench(ctx: BenchContext): Promise<BenchSection> {
  const tag = randomBytes(3).toString('hex');
  const seconds = ctx.quick ? 2 : 5;
  const rounds = ctx.quick ? 3 : 7;
  const idemSchema = `idem_bench_dbos_idem_${tag}`;
  const dbosSchema = `idem_bench_dbos_app_${tag}`;
  const systemDatabase = `dbos_bench_${tag}`;
  const admin = new pg.Client({ connectionString: ctx.databaseUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${systemDatabase}"`);
  const systemUrl = new URL(ctx.databaseUrl);
  systemUrl.pathname = `/${systemDatabase}`;
  const provider = await startProvider(callMs);
  const charge = async (key: string) => {
    const response = await fetch(provider.url, { method: 'POST', headers: { 'idempotency-key': key } });
    return (await response.json()) as { id: string; key: string };
  };

  // idem: one pool in pipeline mode (what docs/operations/deployment.md recommends).
  const idemSide = countingPool({
    connectionString: ctx.databaseUrl,
    max: perSide,
    pipeline: true,
  });
  // DBOS: the same number of connections, split between its system database and the data source.
  const systemSide = countingPool({ connectionString: systemUrl.href, max: perSide / 2 });
  const appSide = countingPool({ connectionString: ctx.databaseUrl, max: perSide / 2 });
  const dbosStatements = () => systemSide.count.statements + appSide.count.statements;

  const sql = fromPg(idemSide.pool);
  let launched = false;
  try {
    await migrate(sql, { schema: idemSchema });
    await admin.query(
      `CREATE TABLE "${idemSchema}".payments (id bigserial PRIMARY KEY, amount int NOT NULL)`,
    );
    await admin.query(`CREATE SCHEMA "${dbosSchema}"`);
    await admin.query(
      `CREATE TABLE "${dbosSchema}".payments (id bigserial PRIMARY KEY, amount int NOT NULL)`,
    );
    const idem = createIdem({ sql, schema: idemSchema });
    const idemInsert = `INSERT INTO "${idemSchema}".payments (amount) VALUES ($1) RETURNING id`;
    const dbosInsert = `INSERT INTO "${dbosSchema}".payments (amount) VALUES ($1) RETURNING id`;

    const idemPay = (key: string) =>
      idem.steps({ tenant: 'acme', operation: 'pay', key, request: { amount: 1 } }, async (op) => {
        await op.step('record', async (tx) => (await tx.query<{ id: string }>(idemInsert, [1])).rows[0]);
        const charged = await op.call('charge', ({ key: callKey }) => charge(callKey));
        await op.step('settle', async (tx) => (await tx.query<{ id: string }>(idemInsert, [2])).rows[0]);
        return charged;
      });

    const ds = new PgDataSource('app', appSide.pool, dbosSchema);
    const payWorkflow = DBOS.registerWorkflow(
      async (amount: number) => {
        await ds.runTransaction(
          async () => (await ds.client.query<{ id: string }>(dbosInsert, [amount])).rows[0],
          'record',
        );
        const charged = await DBOS.runStep(() => charge(`${DBOS.workflowID}:charge`), { name: 'charge' });
        await ds.runTransaction(
          async () => (await ds.client.query<{ id: string }>(dbosInsert, [2])).rows[0],
          'settle',
        );
        return charged;
      },
      { name: 'pay' },
    );
    const dbosPay = (key: string) => DBOS.withNextWorkflowID(key, () => payWorkflow(1));
    DBOS.setConfig({
      name: `idem-bench-${tag}`,
      systemDatabaseUrl: systemUrl.href,
      systemDatabasePool: systemSide.pool,
      systemDatabasePoolSize: perSide / 2,
      logLevel: 'error',
    });
    await DBOS.launch();
    launched = true;

    let calls = 0;
    const done = { idem: [] as string[], dbos: [] as string[] };
    const perIntent = { idem: [] as number[], dbos: [] as number[] };
    const load = (side: 'idem' | 'dbos', c: number) => async (): Promise<LoadResult> => {
      const pay = side === 'idem' ? idemPay : dbosPay;
      const statements = side === 'idem' ? () => idemSide.count.statements : dbosStatements;
      const before = statements();
      const result = await closedLoop(c, seconds * 1000, async () => {
        const key = `${tag}-${side}-${calls++}`;
        await pay(key);
        if (done[side].length < 5000) done[side].push(key);
      });
      perIntent[side].push((statements() - before) / result.ops);
      completed[side] += result.ops;
      return result;
    };

    const figures: BenchFigure[] = [];
    const add = (name: string, [them, us]: [LoadResult, LoadResult], unit: string, target?: number) => {
      const ratio = us.opsPerSecond / them.opsPerSecond;
      figures.push({
        name,
        value: round(us.opsPerSecond, 0),
        unit,
        baseline: { name: 'DBOS Transact 5.3', value: round(them.opsPerSecond, 0) },
        ratio: round(ratio),
        higherIsBetter: true,
        ...(target
          ? {
              target: { ratio: target, description: `≥ ${target}× DBOS Transact 5.3` },
              holds: ratio >= target,
            }
          : {}),
      });
      ctx.log(
        `  ${name}: idem ${round(us.opsPerSecond, 0)} vs DBOS ${round(them.opsPerSecond, 0)} ${unit} (${round(ratio)}×)`,
      );
    };

    const completed = { idem: 0, dbos: 0 };
    // What DBOS sends with no workflow running (its background work), counted in its figures.
    const idleFrom = dbosStatements();
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const idlePerSecond = (dbosStatements() - idleFrom) / 2;
    ctx.log('dbos: warm-up');
    await load('dbos', 16)();
    await load('idem', 16)();
    perIntent.idem.length = 0;
    perIntent.dbos.length = 0;
    for (const c of [16, 64]) {
      ctx.log(
        `dbos: local, call (${callMs} ms), local; c=${c}, ${rounds} alternating rounds of ${seconds} s`,
      );
      add(
        `local–call–local first execution, c=${c}`,
        await sideBySide(rounds, load('dbos', c), load('idem', c)),
        'intents/s',
        2,
      );
    }

    // Replays: keys (workflow ids) already done, again; each side returns its recorded result.
    const replay = (side: 'idem' | 'dbos') => () => {
      const keys = done[side];
      const pay = side === 'idem' ? idemPay : dbosPay;
      let at = 0;
      return closedLoop(16, seconds * 1000, () => pay(keys[at++ % keys.length]!));
    };
    const replayed = { idem: await idemPay(done.idem[0]!), dbos: await dbosPay(done.dbos[0]!) };
    if (!replayed.idem.replayed || !replayed.idem.value.id || !replayed.dbos.id)
      throw new Error('a replay did not return the recorded charge');
    ctx.log('dbos: replays, c=16');
    const replayStatements = { idem: 0, dbos: 0 };
    const counted = (side: 'idem' | 'dbos') => async () => {
      const statements = side === 'idem' ? () => idemSide.count.statements : dbosStatements;
      const before = statements();
      const result = await replay(side)();
      replayStatements[side] = (statements() - before) / result.ops;
      return result;
    };
    add(
      'replay of a completed intent (same key / workflow id), c=16',
      await sideBySide(rounds, counted('dbos'), counted('idem')),
      'replays/s',
    );

    // Every intent wrote its two rows, on each side.
    for (const [side, schema] of [
      ['idem', idemSchema],
      ['dbos', dbosSchema],
    ] as const) {
      const { rows } = await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".payments`,
      );
      if (rows[0]!.n !== 2 * completed[side]) {
        throw new Error(`${side}: ${rows[0]!.n} payment rows for ${completed[side]} intents`);
      }
    }
    const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
    const statementsFigure = (name: string, us: number, them: number) => {
      figures.push({
        name,
        value: round(us, 1),
        unit: 'statements',
        baseline: { name: 'DBOS Transact 5.3', value: round(them, 1) },
        ratio: round(them / us),
        higherIsBetter: false,
      });
      ctx.log(`  ${name}: idem ${round(us, 1)} vs DBOS ${round(them, 1)}`);
    };
    statementsFigure(
      'statements per first execution (all rounds, median)',
      median(perIntent.idem),
      median(perIntent.dbos),
    );
    statementsFigure('statements per replay', replayStatements.idem, replayStatements.dbos);

    return {
      name: 'DBOS Transact',
      figures,
      notes: [
        `Versions: @dbos-inc/dbos-sdk 5.3.0 (its system database a database of its own, ${systemDatabase}, on the same server, dropped afterwards), node-postgres ${(createRequire(import.meta.url)('pg/package.json') as { version: string }).version} on both sides; idem: this tree.`,
        `The flow on both sides: INSERT one payment row in a transaction; POST to a local HTTP server that answers after ${callMs} ms (the same fetch function on both sides, keep-alive); INSERT a second row in a transaction. idem: idem.steps keyed by (tenant, operation, key) with op.step, op.call (its derived key as the provider's idempotency key), op.step. DBOS: a registered workflow run under DBOS.withNextWorkflowID(key), two DBOS transactions on a node-postgres data source and DBOS.runStep for the call (key: workflow id + ':charge').`,
        `Connections: ${perSide} per side. idem: one pool of ${perSide} in pipeline mode. DBOS: its system-database pool of ${perSide / 2} (passed as systemDatabasePool) and the data source's pool of ${perSide / 2}, both default (not pipelined) node-postgres pools, as DBOS would make them.`,
        'DBOS 5.3’s node-postgres data source (@dbos-inc/nodepg-datasource) is not published on the registry, and the published 4.x data sources import helpers 5.3 removed; the data source used is a minimal one in this file, to 5.3’s DataSourceTransactionHandler contract: SELECT the completion row, BEGIN, the user’s INSERT, INSERT the completion row (ON CONFLICT DO NOTHING), SELECT the workflow’s owner (assertStillOwnsWorkflow, on the system pool), COMMIT. It does not implement the optional deleteCheckpoints, which DBOS would otherwise run when each workflow completes: DBOS is counted, and timed, without that cleanup.',
        `Statements per intent: every query() each side’s pg clients sent during the measured runs (a counter wrapped around client.query on every connection of the pools, which pool.query goes through too), divided by the intents completed; BEGIN and COMMIT count as statements. pg_stat_statements is not installed on the server. In idem’s pipeline mode BEGIN goes out with the first statement and COMMIT with the last, so its round trips are fewer than its statements; DBOS’s are one each. With no workflow running DBOS sent ${round(idlePerSecond, 1)} statements/s of its own (background work), counted in its figures (a fraction of a statement per intent at these rates).`,
        `Throughput: closed loop, ${rounds} alternating rounds of ${seconds} s per concurrency (DBOS first in each round), median kept, after a warm-up round on each side. Replays: up to 5000 completed keys (workflow ids) replayed round-robin at c=16; idem returns the recorded outcome, DBOS the recorded workflow result. Both sides run in this one Node.js process on the 2-core bench machine, with PostgreSQL on the same host.`,
      ],
    };
  } finally {
    if (launched) await DBOS.shutdown();
    await provider.close();
    await idemSide.pool.end();
    await appSide.pool.end();
    await systemSide.pool.end().catch(() => undefined);
    await admin.query(`DROP SCHEMA IF EXISTS "${idemSchema}" CASCADE`);
    await admin.query(`DROP SCHEMA IF EXISTS "${dbosSchema}" CASCADE`);
    await admin.query(`DROP DATABASE IF EXISTS "${systemDatabase}" WITH (FORCE)`);
    await admin.end();
  }
}
