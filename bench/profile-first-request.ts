/**
 * `node --cpu-prof --import tsx bench/profile-first-request.ts [default|no-read|claim|floor]`:
 * first requests to one Fastify route through a real socket (undici, in this process), for a CPU
 * profile of the whole request. `summarise` below groups a .cpuprofile's self time by where the code lives.
 * Not part of `npm run bench`: a tool for finding Node's share of a first request.
 *
 * Environment: REQUESTS (measured, default 6000) after WARMUP (default 2000, outside the clock);
 * PIPELINE=1 for a pool in node-postgres's pipeline mode; REPLAY=1 sends one key over and over
 * (replays); FLOOR_DESIGN=commit makes `floor` the design without the read in front.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import pg from 'pg';
import { request } from 'undici';
import { fromPg } from '../src/adapters/pg.js';
import type { Queryable } from '../src/core/sql.js';
import { idempotency } from '../src/http/fastify.js';
import { migrate } from '../src/migrate/migrate.js';
import { createIdem } from '../src/operations/idem.js';
import { renderStatements } from '../src/operations/statements.js';
import { floorStatements } from './lib/floor.js';

if (process.argv[2] === 'summarise') {
  summarise(process.argv[3]!);
} else {
  await profile(process.argv[2] ?? 'default');
}

async function profile(variant: string): Promise<void> {
  const schema = `idem_prof_${randomBytes(3).toString('hex')}`;
  const pool = new pg.Pool({
    connectionString: process.env.DATABASE_URL,
    max: 16,
    pipeline: process.env.PIPELINE === '1',
  });
  const sql = fromPg(pool);
  await migrate(sql, { schema });
  await pool.query(
    `CREATE TABLE "${schema}".orders (id bigserial PRIMARY KEY, tenant text, amount int, note text)`,
  );
  const insert = `INSERT INTO "${schema}".orders (tenant, amount, note) VALUES ($1, $2, $3) RETURNING id`;
  const app = Fastify({ logger: false });
  await app.register(idempotency, { idem: createIdem({ sql, schema }), singleTenant: true });
  const options =
    variant === 'claim'
      ? { recording: 'claim' as const }
      : variant === 'no-read'
        ? { readFirst: false }
        : variant === 'floor'
          ? false
          : {};
  const statements = renderStatements(schema);
  app.post('/orders', { config: { idempotency: options } }, async (req, reply) => {
    const order = req.body as { amount: number; note: string };
    const write = async (tx: Queryable) =>
      (await tx.query<{ id: string }>(insert, ['acme', order.amount, order.note])).rows[0]!.id;
    const id =
      options === false
        ? await floorStatements(
            sql,
            statements,
            process.env.FLOOR_DESIGN === 'commit' ? 'commit' : 'commit-read',
            String(req.headers['idempotency-key']),
            write,
          )
        : await write(req.idem!.tx);
    return reply.code(201).send({ id, amount: order.amount });
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/orders`;
  const body = JSON.stringify({ amount: 1, currency: 'EUR', note: 'benchmark order' });
  let n = 0;
  let total = Number(process.env.WARMUP ?? 2000);
  const send = () =>
    Promise.all(
      Array.from({ length: 16 }, async () => {
        while (n < total) {
          const key = process.env.REPLAY ? `k-0-${n++ * 0}` : `k-${n++}`;
          const res = await request(url, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'idempotency-key': `"${key}"` },
            body,
          });
          await res.body.dump();
        }
      }),
    );
  // Warm-up outside the clock: the JIT, the pool's connections and the prepared statements.
  await send();
  const measured = Number(process.env.REQUESTS ?? 6000);
  total += measured;
  const started = performance.now();
  const cpu0 = process.cpuUsage();
  await send();
  const cpu = process.cpuUsage(cpu0);
  console.log(
    `${variant}: ${measured} requests in ${Math.round(performance.now() - started)} ms; Node CPU ${Math.round((cpu.user + cpu.system) / measured)} µs per request (server and client)`,
  );
  await app.close();
  await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  await pool.end();
}

function summarise(file: string): void {
  interface Node {
    id: number;
    callFrame: { functionName: string; url: string };
    children?: number[];
  }
  const profileData = JSON.parse(readFileSync(file, 'utf8')) as {
    nodes: Node[];
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(profileData.nodes.map((node) => [node.id, node]));
  const self = new Map<number, number>();
  profileData.samples.forEach((id, i) =>
    self.set(id, (self.get(id) ?? 0) + (profileData.timeDeltas[i] ?? 0)),
  );
  const groups = new Map<string, number>();
  const functions = new Map<string, number>();
  let total = 0;
  for (const [id, us] of self) {
    const { url, functionName } = byId.get(id)!.callFrame;
    const group = url.includes('/src/')
      ? `idem ${url.split('/src/')[1]!.split('/')[0]}`
      : url.includes('node_modules/')
        ? url.split('node_modules/').at(-1)!.split('/')[0]!
        : url.startsWith('node:')
          ? url.split('/')[0]!
          : functionName.startsWith('(')
            ? functionName
            : url || '(native)';
    if (functionName === '(idle)') continue;
    total += us;
    groups.set(group, (groups.get(group) ?? 0) + us);
    const fn = `${functionName || '(anonymous)'} ${url.split('/').slice(-2).join('/')}`;
    functions.set(fn, (functions.get(fn) ?? 0) + us);
  }
  const top = (m: Map<string, number>, k: number) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, k)
      .map(([name, us]) => `${((100 * us) / total).toFixed(1).padStart(5)} %  ${name}`);
  console.log(top(groups, 18).join('\n'));
  console.log('--');
  console.log(top(functions, 25).join('\n'));
}
