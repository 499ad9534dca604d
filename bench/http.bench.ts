/**
 * HTTP: a Fastify endpoint that inserts one row, without idem and with idem/fastify, driven over
 * HTTP by autocannon at 32 connections. First requests carry a unique key each (autocannon's
 * `setupRequest`); replays all carry one finished key. Reported: throughput and p99 ratios.
 *
 * The load generator runs in a child process (this same file, started with
 * IDEM_HTTP_BENCH_LOADGEN set), so it never shares the server's event loop. In full mode the same
 * figures are also taken with autocannon in-process, and the notes say how the two arrangements
 * compare on this machine.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import pg from 'pg';
import { fromPg } from '../src/adapters/pg.js';
import { HttpIdempotency } from '../src/http/engine.js';
import { idempotency } from '../src/http/fastify.js';
import type { Transaction } from '../src/core/sql.js';
import type { Idem } from '../src/operations/idem.js';
import { toOutcome } from '../src/operations/outcome.js';
import { migrate } from '../src/migrate/migrate.js';
import { createIdem } from '../src/operations/idem.js';
import { renderStatements } from '../src/operations/statements.js';
import { floorStatements, type FloorDesign } from './lib/floor.js';
import { rotate, round } from './lib/measure.js';
import type { BenchContext, BenchFigure, BenchSection } from './lib/types.js';

/** What one load run is told (through the environment when it runs in a child process). */
interface LoadSpec {
  url: string;
  path: string;
  connections: number;
  seconds: number;
  /** Unique key per request with this prefix; or one fixed key (replays); or none (plain). */
  keys: { kind: 'unique'; prefix: string } | { kind: 'fixed'; key: string } | { kind: 'none' };
}

interface LoadResult {
  /** CPU per request of this process (the Fastify server and its pg client), in µs. */
  serverCpuUs?: number;
  /** CPU per request of the PostgreSQL backends serving the pool, in µs (when /proc shows them). */
  databaseCpuUs?: number;
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  total: number;
  non2xx: number;
  errors: number;
}

const body = JSON.stringify({ amount: 1, currency: 'EUR', note: 'benchmark order' });

/** One autocannon run, in this process. */
async function load(spec: LoadSpec): Promise<LoadResult> {
  let n = 0;
  const headers: Record<string, string> = { 'content-type': 'application/json', 'x-tenant': 'acme' };
  if (spec.keys.kind === 'fixed') headers['idempotency-key'] = `"${spec.keys.key}"`;
  const { keys } = spec;
  const result = await autocannon({
    url: spec.url,
    connections: spec.connections,
    pipelining: 1,
    duration: spec.seconds,
    requests: [
      {
        method: 'POST',
        path: spec.path,
        headers,
        body,
        ...(keys.kind === 'unique'
          ? {
              setupRequest: (request: autocannon.Request) => ({
                ...request,
                headers: { ...request.headers, 'idempotency-key': `"${keys.prefix}-${n++}"` },
              }),
            }
          : {}),
      },
    ],
  });
  return {
    requestsPerSecond: result.requests.total / spec.seconds,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    total: result.requests.total,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
  };
}

/**
 * A load generator in a child process: this same file, started with IDEM_HTTP_BENCH_LOADGEN set.
 * It stays up for the whole benchmark and takes one spec per IPC message, so the process start
 * (about a second of tsx and imports) is paid once, outside every measurement.
 */
interface LoadGenerator {
  run(spec: LoadSpec): Promise<LoadResult>;
  close(): void;
}

async function startLoadGenerator(): Promise<LoadGenerator> {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
    env: { ...process.env, IDEM_HTTP_BENCH_LOADGEN: '1' },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const pending: { resolve: (message: unknown) => void; reject: (error: Error) => void }[] = [];
  child.on('message', (message) => pending.shift()?.resolve(message));
  child.on('exit', (code) => {
    for (const waiter of pending.splice(0)) waiter.reject(new Error(`load generator exited with ${code}`));
  });
  const next = () => new Promise<unknown>((resolve, reject) => pending.push({ resolve, reject }));
  await next(); // 'ready'
  return {
    async run(spec) {
      const result = next();
      child.send(spec);
      return (await result) as LoadResult;
    },
    close: () => child.disconnect(),
  };
}

if (process.env.IDEM_HTTP_BENCH_LOADGEN) {
  process.on('message', (spec: LoadSpec) => {
    void load(spec).then((result) => process.send!(result));
  });
  process.send!('ready');
}

export default async function httpBench(ctx: BenchContext): Promise<BenchSection> {
  const schema = `idem_bench_http_${randomBytes(3).toString('hex')}`;
  const application = `idem-bench-http-${randomBytes(3).toString('hex')}`;
  // The pool as docs/operations/deployment.md recommends it, in node-postgres's pipeline mode (BEGIN goes out
  // with the first statement, idem's record with COMMIT); and the same pool without it, for the
  // figures of a pool created the default way.
  const poolOptions = {
    connectionString: ctx.databaseUrl,
    max: 32,
    idleTimeoutMillis: 0, // keep the backends whose CPU is measured
    application_name: application,
  };
  const pool = new pg.Pool({ ...poolOptions, pipeline: true });
  const sequentialPool = new pg.Pool(poolOptions);
  const sql = fromPg(pool);
  const sequentialSql = fromPg(sequentialPool);
  await migrate(sql, { schema });
  await pool.query(
    `CREATE TABLE "${schema}".orders (id bigserial PRIMARY KEY, tenant text NOT NULL, amount int NOT NULL, note text)`,
  );
  const insert = `INSERT INTO "${schema}".orders (tenant, amount, note) VALUES ($1, $2, $3) RETURNING id`;
  type Order = { amount: number; note: string };

  const app = Fastify({ logger: false });
  await app.register(idempotency, {
    idem: createIdem({ sql, schema }),
    tenant: (request) => request.headers['x-tenant'] as string | undefined,
  });
  // The plain endpoint: what the service does without idem, one autocommitted INSERT.
  app.post('/plain', { config: { idempotency: false } }, async (request, reply) => {
    const order = request.body as Order;
    const { rows } = await pool.query<{ id: string }>(insert, ['acme', order.amount, order.note]);
    return reply.code(201).send({ id: rows[0]!.id, amount: order.amount });
  });
  // The same INSERT inside BEGIN … COMMIT, written with node-postgres alone (no idem adapter, so
  // no transaction bounds either): on a pool created the default way, each statement waits for the
  // one before (what a transactional endpoint written with node-postgres does); on the pipelined
  // pool, BEGIN goes out with the INSERT.
  const transactional =
    (on: pg.Pool, pipelined: boolean) => async (request: FastifyRequest, reply: FastifyReply) => {
      const order = request.body as Order;
      const client = await on.connect();
      try {
        let rows: { id: string }[];
        if (pipelined) {
          const [, inserted] = await Promise.all([
            client.query('BEGIN'),
            client.query<{ id: string }>(insert, ['acme', order.amount, order.note]),
          ]);
          ({ rows } = inserted);
        } else {
          await client.query('BEGIN');
          ({ rows } = await client.query<{ id: string }>(insert, ['acme', order.amount, order.note]));
        }
        await client.query('COMMIT');
        client.release();
        return reply.code(201).send({ id: rows[0]!.id, amount: order.amount });
      } catch (error) {
        client.release(true); // never hand a connection in an unknown transaction state back
        throw error;
      }
    };
  app.post('/plain-tx', { config: { idempotency: false } }, transactional(sequentialPool, false));
  app.post('/plain-tx-pipelined', { config: { idempotency: false } }, transactional(pool, true));
  // With idem: the INSERT goes through the transaction the key is recorded in. `/orders` is the
  // default (recorded at commit, readFirst auto); the others are the other designs, side by side.
  const idemHandler = async (request: FastifyRequest, reply: FastifyReply) => {
    const order = request.body as Order;
    const { rows } = await request.idem!.tx.query<{ id: string }>(insert, ['acme', order.amount, order.note]);
    return reply.code(201).send({ id: rows[0]!.id, amount: order.amount });
  };
  app.post('/orders', idemHandler);
  app.post('/orders-claim', { config: { idempotency: { recording: 'claim' } } }, idemHandler);
  app.post('/orders-read', { config: { idempotency: { readFirst: true } } }, idemHandler);
  const sequentialIdem = createIdem({ sql: sequentialSql, schema });
  app.post('/orders-sequential', { config: { idempotency: { idem: sequentialIdem } } }, idemHandler);
  // The SQL floor of each design: its raw statements in a plain Fastify route, with no idem code
  // around them (no fingerprint, no capture): what the design costs the driver and the database.
  const statements = renderStatements(schema);
  const floorRoute = (path: string, design: FloorDesign, on = sql) =>
    app.post(path, { config: { idempotency: false } }, async (request, reply) => {
      const order = request.body as Order;
      const key = String(request.headers['idempotency-key']);
      const id = await floorStatements(on, statements, design, key, async (tx) => {
        const { rows } = await tx.query<{ id: string }>(insert, ['acme', order.amount, order.note]);
        return rows[0]!.id;
      });
      return reply.code(201).send({ id, amount: order.amount });
    });
  // The SQL floor of a replay: the read idem sends for it (same text and prepared name, same pool),
  // and the stored status, headers and body written back with the replay header, in a plain route:
  // no key parse, no fingerprint, no hooks. What a replay costs beyond it is idem's JavaScript.
  const replayRead = { name: statements.names.read.name, text: statements.read };
  app.post('/floor-replay', { config: { idempotency: false } }, async (request, reply) => {
    const key = String(request.headers['idempotency-key']).slice(1, -1);
    const { rows } = await pool.query<{ result: string; body: Buffer }>({
      ...replayRead,
      values: ['acme', 'POST /orders', key],
    });
    const stored = JSON.parse(rows[0]!.result) as { status: number; headers: [string, string][] };
    reply.code(stored.status);
    for (const [name, value] of stored.headers) void reply.header(name, value);
    return reply.header('idempotent-replayed', 'true').send(rows[0]!.body);
  });
  floorRoute('/floor-claim', 'claim');
  floorRoute('/floor-commit-read', 'commit-read');
  floorRoute('/floor-commit', 'commit');
  floorRoute('/floor-commit-sequential', 'commit', sequentialSql);
  await app.listen({ port: 0, host: '127.0.0.1' });
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;

  // Short runs, alternated many times: on a shared 2-core machine the CPU left to the benchmark
  // drifts, and alternation spreads the drift over every variant alike.
  const seconds = ctx.quick ? 2 : 4;
  const rounds = ctx.quick ? 2 : 5;
  const connections = 32;
  const run = randomBytes(3).toString('hex');
  const replayKey = `replay-${run}`;
  let prefixes = 0;
  const spec = (path: string, keys: LoadSpec['keys'], s = seconds): LoadSpec => ({
    url,
    path,
    connections,
    seconds: s,
    keys,
  });
  const plain = (s?: number) => spec('/plain', { kind: 'none' }, s);
  const plainTx = (s?: number) => spec('/plain-tx', { kind: 'none' }, s);
  const plainTxPipelined = (s?: number) => spec('/plain-tx-pipelined', { kind: 'none' }, s);
  const unique = (path: string, s?: number) =>
    spec(path, { kind: 'unique', prefix: `${run}-${prefixes++}` }, s);
  const first = (s?: number) => unique('/orders', s);
  const replay = (s?: number) => spec('/orders', { kind: 'fixed', key: replayKey }, s);

  const loadBefore = os.loadavg()[0]!;
  const generator = await startLoadGenerator();
  // Where the time goes: CPU of this process and of our PostgreSQL backends over each run.
  const backendTicks = async () => {
    const { rows } = await pool.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE application_name = $1`,
      [application],
    );
    let ticks = 0;
    for (const { pid } of rows) {
      try {
        const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
        ticks += Number(fields[11]) + Number(fields[12]); // utime + stime
      } catch {
        return undefined; // the database is not on this machine, or not readable
      }
    }
    return ticks;
  };
  const loadInChild = async (s: LoadSpec): Promise<LoadResult> => {
    const [cpu0, db0] = [process.cpuUsage(), await backendTicks()];
    const result = await generator.run(s);
    const [cpu1, db1] = [process.cpuUsage(cpu0), await backendTicks()];
    const n = Math.max(1, result.total);
    result.serverCpuUs = Math.round((cpu1.user + cpu1.system) / n);
    // Linux clock ticks are 10 ms.
    if (db0 !== undefined && db1 !== undefined) result.databaseCpuUs = Math.round(((db1 - db0) * 10_000) / n);
    return result;
  };
  // Warm-up: JIT, pool connections, and the replayed key's record.
  ctx.log('http: warm-up');
  const designs = {
    claim: (s?: number) => unique('/orders-claim', s),
    read: (s?: number) => unique('/orders-read', s),
    sequential: (s?: number) => unique('/orders-sequential', s),
    floorSequential: (s?: number) => unique('/floor-commit-sequential', s),
    floorClaim: (s?: number) => unique('/floor-claim', s),
    floorCommitRead: (s?: number) => unique('/floor-commit-read', s),
    floorCommit: (s?: number) => unique('/floor-commit', s),
    floorReplay: (s?: number) => spec('/floor-replay', { kind: 'fixed', key: replayKey }, s),
  };
  for (const s of [
    plain(1),
    plainTx(1),
    plainTxPipelined(1),
    first(1),
    replay(1),
    ...Object.values(designs).map((d) => d(1)),
  ])
    await loadInChild(s);

  type Variant = 'plain' | 'plainTx' | 'plainTxPipelined' | 'first' | 'replay' | keyof typeof designs;
  const order: [Variant, (s?: number) => LoadSpec][] = [
    ['plain', plain],
    ['first', first],
    ['replay', replay],
    ['plainTx', plainTx],
    ['plainTxPipelined', plainTxPipelined],
    ['claim', designs.claim],
    ['read', designs.read],
    ['sequential', designs.sequential],
    ['floorSequential', designs.floorSequential],
    ['floorClaim', designs.floorClaim],
    ['floorCommitRead', designs.floorCommitRead],
    ['floorCommit', designs.floorCommit],
    ['floorReplay', designs.floorReplay],
  ];
  const runs = Object.fromEntries(order.map(([name]) => [name, [] as LoadResult[]])) as Record<
    Variant,
    LoadResult[]
  >;
  for (let r = 0; r < rounds; r++) {
    ctx.log(`http: round ${r + 1}/${rounds} (autocannon in a child process, ${seconds} s each)`);
    for (const [name, make] of rotate(order, r)) runs[name].push(await loadInChild(make()));
  }
  const [p, f, rp, tx] = [median(runs.plain), median(runs.first), median(runs.replay), median(runs.plainTx)];
  const [fClaim, fRead] = [median(runs.claim), median(runs.read)];
  const txPipelined = median(runs.plainTxPipelined);
  const [fSequential, floorSequential] = [median(runs.sequential), median(runs.floorSequential)];
  const [floorClaim, floorCommitRead, floorCommit] = [
    median(runs.floorClaim),
    median(runs.floorCommitRead),
    median(runs.floorCommit),
  ];
  const floorReplay = median(runs.floorReplay);

  // The other arrangement, for the fairness note: autocannon on this process's event loop.
  let inProcess: { plain: LoadResult; first: LoadResult; replay: LoadResult } | undefined;
  if (!ctx.quick) {
    ctx.log('http: the same three with autocannon in-process, 3 alternating rounds of 3 s');
    const own: LoadResult[][] = [[], [], []];
    for (let r = 0; r < 3; r++) {
      own[0]!.push(await load(plain(3)));
      own[1]!.push(await load(first(3)));
      own[2]!.push(await load(replay(3)));
    }
    inProcess = { plain: median(own[0]!), first: median(own[1]!), replay: median(own[2]!) };
  }

  generator.close();
  const loadAfter = os.loadavg()[0]!;
  const coreUs = await coreMicroseconds(ctx.quick ? 20_000 : 100_000);
  const stored = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".requests`);
  const failures = Object.values(runs)
    .flat()
    .reduce((n, x) => n + x.non2xx + x.errors, 0);
  await app.close();
  await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  await pool.end();
  await sequentialPool.end();

  // The plain endpoint is one autocommitted INSERT: the strictest reading of "an endpoint that
  // inserts one row". The same targets against an endpoint that wraps its INSERT in a transaction
  // (the baseline of the keyed-operations benchmark) are shown beside it.
  const txName = 'plain endpoint, INSERT in BEGIN … COMMIT';
  const floorName = (design: string) => `SQL floor of ${design}: its raw statements in a plain route`;
  const figures: BenchFigure[] = [
    throughput('first requests (default: recorded at commit, readFirst auto): throughput', f, p, 0.35),
    throughput('first requests, read in front (readFirst: true): throughput', fRead, p),
    throughput('first requests, claim-first: throughput', fClaim, p),
    throughput('first requests (default) on a pool without pipeline mode: throughput', fSequential, p),
    throughput('SQL floor, recorded at commit, no read: throughput', floorCommit, p),
    throughput('SQL floor, recorded at commit with the read: throughput', floorCommitRead, p),
    throughput('SQL floor, claim-first: throughput', floorClaim, p),
    throughput(
      'SQL floor, recorded at commit, no read, without pipeline mode: throughput',
      floorSequential,
      p,
    ),
    throughput(
      'first requests (default) vs the SQL floor of its design',
      f,
      floorCommit,
      undefined,
      floorName('commit-time recording without the read'),
    ),
    throughput(
      'first requests, read in front, vs the SQL floor of its design',
      fRead,
      floorCommitRead,
      undefined,
      floorName('commit-time recording with the read'),
    ),
    throughput(
      'first requests, claim-first, vs the SQL floor of its design',
      fClaim,
      floorClaim,
      undefined,
      floorName('claim-first'),
    ),
    throughput(
      'first requests without pipeline mode vs the SQL floor of its design',
      fSequential,
      floorSequential,
      undefined,
      floorName('commit-time recording without pipeline mode'),
    ),
    throughput(
      'pipeline mode vs none: first requests (default)',
      f,
      fSequential,
      undefined,
      'the same route on a pool without pipeline mode',
    ),
    latency('first requests: p99 latency', f, p, 1.5),
    // Issue 20 restates the throughput targets: first requests against the one-INSERT endpoint,
    // replays against the transactional one (a replay and the plain endpoint are one statement each).
    throughput('replays: throughput', rp, p),
    latency('replays: p99 latency', rp, p),
    throughput('first requests vs a transactional endpoint: throughput', f, tx, undefined, txName),
    latency('first requests vs a transactional endpoint: p99 latency', f, tx, 1.5, txName),
    throughput('replays vs a transactional endpoint: throughput', rp, tx, 1.8, txName),
    throughput(
      'replays vs a transactional endpoint on the pipelined pool: throughput',
      rp,
      txPipelined,
      undefined,
      `${txName}, BEGIN pipelined with the INSERT`,
    ),
    throughput(
      'first requests vs a transactional endpoint on the pipelined pool: throughput',
      f,
      txPipelined,
      undefined,
      `${txName}, BEGIN pipelined with the INSERT`,
    ),
    cpu('first requests: CPU per request (Node + PostgreSQL)', f, p, 3),
    cpu('first requests, read in front: CPU per request (Node + PostgreSQL)', fRead, p),
    cpu('first requests, claim-first: CPU per request (Node + PostgreSQL)', fClaim, p),
    cpu('first requests without pipeline mode: CPU per request (Node + PostgreSQL)', fSequential, p),
    nodeCpu('first requests: CPU per request in Node', f, p),
    nodeCpu('SQL floor of the default design: CPU per request in Node', floorCommit, p),
    cpu('replays: CPU per request (Node + PostgreSQL)', rp, p),
    throughput(
      'replays vs the SQL floor of a replay',
      rp,
      floorReplay,
      undefined,
      "SQL floor of a replay: idem's read and the stored response, raw, in a plain route",
    ),
    // The bound on the ratio above: what a replay with no idem code around its read would reach.
    throughput(
      'SQL floor of a replay vs a transactional endpoint: throughput (the most a replay can reach)',
      floorReplay,
      tx,
      undefined,
      txName,
    ),
    nodeCpu(
      'replays vs the SQL floor of a replay: CPU per request in Node',
      rp,
      floorReplay,
      'SQL floor of a replay',
    ),
  ].filter((figure): figure is BenchFigure => figure !== undefined);
  for (const figure of figures) {
    ctx.log(
      `  ${figure.name}: ${figure.value} ${figure.unit} vs ${figure.baseline?.value} (${figure.ratio}×)`,
    );
  }
  const describe = (x: LoadResult) =>
    `${round(x.requestsPerSecond, 0)} req/s, p50 ${x.p50Ms} ms, p99 ${x.p99Ms} ms, CPU per request ${x.serverCpuUs} µs in Node and ${x.databaseCpuUs ?? '?'} µs in PostgreSQL`;
  const notes = [
    `Fastify 5 on 127.0.0.1, ${connections} autocannon connections, pipelining 1, median of ${rounds} alternating run(s) of ${seconds} s each; node-postgres pool of 32 in pipeline mode (and one without it for the figures that say so); one database, schema dropped afterwards. Plain: ${describe(p)}. First requests: ${describe(f)}. Replays: ${describe(rp)}. Plain INSERT inside a transaction: ${describe(tx)} (on the pipelined pool: ${describe(txPipelined)}).`,
    `Non-2xx answers or socket errors across the measured runs: ${failures}; records stored by the idem endpoint: ${stored.rows[0]!.n}. Machine load average (1 min) ${round(loadBefore, 1)} before and ${round(loadAfter, 1)} after the runs, on ${os.cpus().length} cores: everything else running on the machine competes for the same CPU.`,
    'Where a first request spends its extra time: the plain endpoint sends one autocommitted INSERT (one round trip, one WAL flush). With idem’s default (`recording: commit`, `readFirst: auto`, which stops reading in front after about 70 requests of this all-first-request load) a first request sends BEGIN, the handler’s INSERT, one INSERT of the completed record with the captured response (status, headers, body bytes), and COMMIT: one WAL flush, and on a pool in pipeline mode two round trips (BEGIN goes out with the INSERT, the record with COMMIT), four without it. With the read in front (`readFirst: true`) one more; claim-first (`recording: claim`) sends the read, BEGIN, the claim, the INSERT, the completing UPDATE and COMMIT. In JavaScript, idem adds the key header parse, the SHA-256 fingerprint over the canonical body and the reply capture.',
    'The SQL floor of a design is a plain Fastify route that sends that design’s statements raw (same texts and prepared-statement names, on the same pool, pipelined the same way, bench/lib/floor.ts) around the same INSERT, with no idem code: the physical limit of the design with this server, driver and database. The distance between an idem route and its floor is idem’s JavaScript (key parse, fingerprint, capture, answer).',
    `Figures of the designs side by side: read in front ${describe(fRead)}; claim-first ${describe(fClaim)}; default on a pool without pipeline mode ${describe(fSequential)}; SQL floors: without the read ${describe(floorCommit)}, with the read ${describe(floorCommitRead)}, claim-first ${describe(floorClaim)}, without the read and without pipeline mode ${describe(floorSequential)}.`,
    'A replay sends one indexed read and no transaction, and writes the stored bytes back; it never reaches the handler.',
    `A replay against its SQL floor (the same read, raw, and the stored response written back in a plain route): ${describe(floorReplay)}. What idem adds to a replay is JavaScript: ${(rp.serverCpuUs ?? 0) - (floorReplay.serverCpuUs ?? 0)} µs of Node CPU per request (the key header parse, the canonical JSON and SHA-256 of the fingerprint, the engine's layers, its route hooks). The SQL floor of a replay against the transactional endpoint is the most the replay ratio could reach with no idem code at all. A replay is one read against the transactional endpoint's three statements and one WAL flush, so the replay ratios depend on how long this disk takes to flush (the run's commit latency, at the top of this report): the shorter the flush, the closer they come to the ratio of CPU per request.`,
    `Why replays cannot reach 1.5× the plain endpoint here: the plain endpoint is itself one statement (an autocommitted INSERT), and a replay is one statement too (the indexed read); both pay the same HTTP parsing, routing and JSON work in Fastify, which is most of a request's CPU (${rp.serverCpuUs ?? '?'} µs in Node per replay against ${p.serverCpuUs ?? '?'} µs per plain request, ${rp.databaseCpuUs ?? '?'} against ${p.databaseCpuUs ?? '?'} µs in PostgreSQL). A replay saves the write and the WAL flush, not the request; against an endpoint that wraps its INSERT in a transaction (3 round trips on a pool created the default way, 2 on a pipelined pool, where BEGIN goes out with the INSERT) the same replays are the ratios shown beside.`,
    `The HTTP core's own JavaScript (key parse, tenant and operation, fingerprint, outcome, answer) costs ${round(coreUs, 1)} µs per request, measured with a stub store: the extra CPU per first request above is the driver and the database working through the extra round trips, not the contract logic.`,
  ];
  if (inProcess) {
    const ratio = (a: LoadResult, b: LoadResult) => round(a.requestsPerSecond / b.requestsPerSecond);
    notes.push(
      `Load generator placement, measured on this machine (medians of 3 alternating in-process runs): with autocannon in-process, on the server's one event loop, the plain endpoint did ${round(inProcess.plain.requestsPerSecond, 0)} req/s against ${round(p.requestsPerSecond, 0)} with autocannon in its own process; first requests ran at ${ratio(inProcess.first, inProcess.plain)}× plain in-process against ${ratio(f, p)}× with a child; replays ${ratio(inProcess.replay, inProcess.plain)}× against ${ratio(rp, p)}×; p99 of first requests ${round(inProcess.first.p99Ms / inProcess.plain.p99Ms)}× against ${round(f.p99Ms / p.p99Ms)}×. Node runs a server on one thread: in-process, that thread also runs the generator, so client work is charged to the server and JavaScript-heavy variants are penalised against database-heavy ones; in its own process the generator competes only for CPU, as a client on the same machine would. The figures above therefore use the child process. On a shared machine the run-to-run spread of throughput ratios can be as large as the difference between the two arrangements; CPU per request varies much less and is reported beside them.`,
    );
  }
  return { name: 'HTTP (Fastify)', figures, notes };
}

/**
 * The neutral core's own JavaScript per request (key parse, scope, fingerprint over the canonical
 * body, outcome and answer), with a stub store that answers at once: no database, no HTTP.
 */
async function coreMicroseconds(iterations: number): Promise<number> {
  const tx: Transaction = { client: null, query: async () => ({ rows: [], rowCount: 0 }) };
  const stub = {
    async run(
      spec: { tenant: string; operation: string; key: string },
      handler: (t: Transaction, c: unknown) => Promise<unknown>,
    ) {
      const outcome = toOutcome(await handler(tx, { scope: spec, deriveKey: () => '' }));
      return {
        value: outcome.value,
        state: outcome.state,
        replayed: false,
        resource: null,
        body: outcome.body ?? null,
      };
    },
  } as unknown as Idem;
  const engine = new HttpIdempotency<null>({ idem: stub, tenant: () => 'acme' });
  const parsed = JSON.parse(body) as unknown;
  const captured = {
    status: 201,
    headers: [['content-type', 'application/json; charset=utf-8']] as [string, string][],
    body: Buffer.from('{"id":"123","amount":1}'),
  };
  const once = async (i: number) => {
    const admission = await engine.admit({
      native: null,
      method: 'POST',
      route: '/orders',
      path: '/orders',
      query: '',
      keyFields: [`"key-${i}"`],
      contentLength: body.length,
    });
    if (admission.kind !== 'admitted') throw new Error('the stub request was not admitted');
    await engine.execute(admission.ticket, parsed, async () => captured);
  };
  for (let i = 0; i < iterations / 5; i++) await once(i);
  const started = performance.now();
  for (let i = 0; i < iterations; i++) await once(i);
  return ((performance.now() - started) * 1000) / iterations;
}

/** CPU per request, a figure the machine's load disturbs less than throughput. */
function cpu(name: string, value: LoadResult, base: LoadResult, target?: number): BenchFigure | undefined {
  if (value.databaseCpuUs === undefined || base.databaseCpuUs === undefined) return undefined;
  const total = (x: LoadResult) => (x.serverCpuUs ?? 0) + (x.databaseCpuUs ?? 0);
  const baseName = 'plain Fastify endpoint (one INSERT)';
  const ratio = total(value) / total(base);
  return {
    name,
    value: total(value),
    unit: 'µs',
    baseline: { name: baseName, value: total(base) },
    ratio: round(ratio),
    higherIsBetter: false,
    ...(target !== undefined
      ? { target: { ratio: target, description: `≤ ${target}× ${baseName}` }, holds: ratio <= target }
      : {}),
  };
}

/** CPU per request of the Node process alone (server, idem, driver). */
function nodeCpu(
  name: string,
  value: LoadResult,
  base: LoadResult,
  baseName = 'plain Fastify endpoint (one INSERT)',
): BenchFigure | undefined {
  if (value.serverCpuUs === undefined || base.serverCpuUs === undefined) return undefined;
  return {
    name,
    value: value.serverCpuUs,
    unit: 'µs',
    baseline: { name: baseName, value: base.serverCpuUs },
    ratio: round(value.serverCpuUs / base.serverCpuUs),
    higherIsBetter: false,
  };
}

function median(results: LoadResult[]): LoadResult {
  const sorted = [...results].sort((a, b) => a.requestsPerSecond - b.requestsPerSecond);
  return sorted[Math.floor(sorted.length / 2)]!;
}

function throughput(
  name: string,
  value: LoadResult,
  base: LoadResult,
  target?: number,
  baseName = 'plain Fastify endpoint (one INSERT)',
): BenchFigure {
  const ratio = value.requestsPerSecond / base.requestsPerSecond;
  return {
    name,
    value: round(value.requestsPerSecond, 0),
    unit: 'req/s',
    baseline: { name: baseName, value: round(base.requestsPerSecond, 0) },
    ratio: round(ratio),
    higherIsBetter: true,
    ...(target !== undefined
      ? { target: { ratio: target, description: `≥ ${target}× ${baseName}` }, holds: ratio >= target }
      : {}),
  };
}

function latency(
  name: string,
  value: LoadResult,
  base: LoadResult,
  target?: number,
  baseName = 'plain Fastify endpoint (one INSERT)',
): BenchFigure {
  const ratio = value.p99Ms / base.p99Ms;
  return {
    name,
    value: value.p99Ms,
    unit: 'ms',
    baseline: { name: baseName, value: base.p99Ms },
    ratio: round(ratio),
    higherIsBetter: false,
    ...(target !== undefined
      ? {
          target: { ratio: target, description: `p99 ≤ ${target}× ${baseName}` },
          holds: ratio <= target,
        }
      : {}),
  };
}
