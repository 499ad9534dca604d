/**
 * `npx tsx bench/tenant-keys.ts --before <dir> [--rounds 5] [--seconds 3] [--only dispatch]`: the hot paths before and after migration 0008
 * (tenant_id leading every primary key), side by side in one run, in alternating rounds.
 *
 * `<dir>` is a checkout of the code before the change, with its own migrations, e.g.
 *   git worktree add /tmp/idem-before <commit before 0008_tenant_keys>   (or git archive | tar -x)
 *   ln -s "$PWD/node_modules" /tmp/idem-before/node_modules
 * Each side runs its own code against its own schema, migrated by its own `migrate`, in the same
 * database. "after" runs with the default tenant (what existing users get) and with a named tenant
 * (dispatcher scoped to it). Paths: outbox add (one event per transaction, 8 producers), dispatch
 * (20 000 events over 1 000 keys, no-op publisher), inbox handle (new ids, 8 consumers), claims
 * (10 000 tasks, 8 workers claiming batches of 10 and completing them with completeMany), receipt
 * insert (verified Standard Webhooks deliveries, 8 senders); and outbox add, inbox record and
 * claims enqueue without commits (2000 in one transaction, rolled back), which isolates the
 * statements' own cost from the WAL flushes a shared machine makes erratic. Prints medians per
 * variant and the ratio to before.
 * Not part of `npm run bench`: it needs the older tree.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { closedLoop, round, type LoadResult } from './lib/measure.js';

const { values } = parseArgs({
  options: {
    before: { type: 'string' },
    rounds: { type: 'string', default: '5' },
    seconds: { type: 'string', default: '3' },
    /** Only the paths whose name contains this text, e.g. `--only dispatch`. */
    only: { type: 'string' },
  },
});
if (!values.before) throw new Error('--before <dir>: a checkout of the code before migration 0008');
const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) throw new Error('DATABASE_URL is required');
const rounds = Number(values.rounds);
const durationMs = Number(values.seconds) * 1000;
const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

/* eslint-disable @typescript-eslint/no-explicit-any, @typescript-eslint/no-unsafe-assignment,
   @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-member-access,
   @typescript-eslint/no-unsafe-return -- the two trees' modules are loaded by path, untyped */
type Api = Record<string, any>;

async function load(root: string): Promise<Api> {
  const at = (path: string) => import(pathToFileURL(resolve(root, path)).href) as Promise<Api>;
  return {
    // The event channel (absent in trees before it): createEvents.
    ...(await at('src/core/event-channel.ts').catch(() => ({}))),
    ...(await at('src/adapters/pg.ts')),
    ...(await at('src/migrate/migrate.ts')),
    ...(await at('src/outbox/outbox.ts')),
    ...(await at('src/outbox/dispatcher.ts')),
    ...(await at('src/inbox/inbox.ts')),
    ...(await at('src/claims/claims.ts')),
    ...(await at('src/webhooks/index.ts')),
  };
}

interface Side {
  name: string;
  api: Api;
  schema: string;
  /** The tenant to name, or undefined for code that takes none (before) or the default tenant. */
  tenant?: string;
}

const pool = new pg.Pool({ connectionString: databaseUrl, max: 12 });
const before = await load(values.before);
const after = await load(resolve(import.meta.dirname, '..'));
const tag = randomBytes(3).toString('hex');
const sides: Side[] = [
  { name: 'before', api: before, schema: `idem_bench_before_${tag}` },
  { name: 'after, default tenant', api: after, schema: `idem_bench_after_${tag}` },
  { name: "after, tenant 'acme'", api: after, schema: `idem_bench_after_${tag}`, tenant: 'acme' },
];
for (const side of sides) await side.api.migrate(side.api.fromPg(pool), { schema: side.schema });
const noop = {
  name: 'no-op',
  publish: async (events: { id: string }[]) => events.map((e) => ({ id: e.id, ok: true })),
};

/** One measurement of one path on one side, in operations per second. */
type Path = (side: Side) => Promise<number>;

const paths: Record<string, Path> = {
  'outbox add (tx/s)': async (side) => {
    const sql = side.api.fromPg(pool);
    const outbox = side.api.createOutbox({ sql, schema: side.schema });
    const result: LoadResult = await closedLoop(8, durationMs, (worker, i) =>
      sql.transaction((tx: unknown) =>
        outbox.add(tx, {
          topic: 'bench',
          key: `order-${(worker * 1000 + i) % 1000}`,
          type: 'order.updated',
          payload: { i, amount: 1250 },
          ...(side.tenant ? { tenant: side.tenant } : {}),
        }),
      ),
    );
    return result.opsPerSecond;
  },
  'dispatch (events/s)': async (side) => {
    const sql = side.api.fromPg(pool);
    await pool.query(`TRUNCATE "${side.schema}".outbox`);
    const outbox = side.api.createOutbox({ sql, schema: side.schema, notify: false });
    const count = 20_000;
    for (let done = 0; done < count; done += 1000) {
      await sql.transaction((tx: unknown) =>
        outbox.addMany(
          tx,
          Array.from({ length: 1000 }, (_, i) => ({
            topic: 'bench',
            key: `order-${(done + i) % 1000}`,
            type: 'order.updated',
            payload: { seq: done + i, amount: 1250 },
            ...(side.tenant ? { tenant: side.tenant } : {}),
          })),
        ),
      );
    }
    await pool.query(`ANALYZE "${side.schema}".outbox`);
    // Counted from the event channel where the tree has one, else from the old `counters`.
    const events = side.api.createEvents?.();
    let published = 0;
    events?.on('outbox:published', (batch: { events: unknown[] }) => (published += batch.events.length));
    const dispatcher = side.api.createOutboxDispatcher({
      sql,
      publisher: noop,
      schema: side.schema,
      sweepIntervalMs: 0,
      events,
      ...(side.tenant ? { tenants: [side.tenant] } : {}),
    });
    const started = performance.now();
    await dispatcher.drain({ maxBatches: 1_000_000 });
    if (!events) published = dispatcher.counters.published;
    if (published !== count) throw new Error(`published ${published}`);
    return count / ((performance.now() - started) / 1000);
  },
  'inbox handle (msgs/s)': async (side) => {
    const inbox = side.api.createInbox({ sql: side.api.fromPg(pool), schema: side.schema });
    const run = randomBytes(4).toString('hex');
    const result: LoadResult = await closedLoop(8, durationMs, (worker, i) =>
      inbox.handle(
        {
          consumer: 'billing',
          messageId: `${run}-${worker}-${i}`,
          ...(side.tenant ? { tenant: side.tenant } : {}),
        },
        async () => {},
      ),
    );
    return result.opsPerSecond;
  },
  'claims claim+complete (tasks/s)': async (side) => {
    const claims = side.api.createClaims({ sql: side.api.fromPg(pool), schema: side.schema });
    const queue = `q-${randomBytes(3).toString('hex')}`;
    const count = 10_000;
    const tenant = side.tenant ?? 'acme';
    for (let done = 0; done < count; done += 500) {
      await claims.enqueueMany(
        Array.from({ length: 500 }, (_, i) => ({ tenant, queue, key: `t-${done + i}`, payload: { i } })),
      );
    }
    await pool.query(`ANALYZE "${side.schema}".tasks`);
    let completed = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        // An empty claim is not the end: the rows left may be locked by a claim in flight.
        while (completed < count && performance.now() - started < 120_000) {
          const tasks = await claims.claim(queue, { limit: 10, ...(side.tenant ? { tenant } : {}) });
          if (tasks.length === 0) await new Promise((r) => setTimeout(r, 1));
          else {
            const { completed: done } = await claims.completeMany(tasks);
            completed += done.length;
          }
        }
      }),
    );
    if (completed !== count) throw new Error(`completed ${completed}`);
    return count / ((performance.now() - started) / 1000);
  },
  'receipt insert (receipts/s)': async (side) => {
    const receiver = side.api.createWebhookReceiver({
      sql: side.api.fromPg(pool),
      schema: side.schema,
      sources: {
        billing: {
          verifier: side.api.createStandardWebhooksVerifier({ secrets: [secret] }),
          ...(side.tenant ? { tenant: side.tenant } : {}),
        },
      },
    });
    const webhook = new Webhook(secret);
    const result: LoadResult = await closedLoop(8, durationMs, async () => {
      const id = `msg_${randomUUID()}`;
      const body = JSON.stringify({ type: 'invoice.paid', data: { id } });
      const at = new Date(Math.floor(Date.now() / 1000) * 1000);
      const signature = webhook.sign(id, at, body);
      const answer = await receiver.receive('billing', {
        headers: side.api.recordHeaders({
          'webhook-id': id,
          'webhook-timestamp': String(at.getTime() / 1000),
          'webhook-signature': signature,
        }),
        body: Buffer.from(body),
      });
      if (answer.status !== 202) throw new Error(`receive: ${answer.status}`);
    });
    return result.opsPerSecond;
  },
};

/**
 * The same writes without their commits: on a shared machine a commit waits for the WAL flush of
 * everyone's transactions, and throughput swings several-fold between rounds; the cost of the
 * statements themselves (the wider keys, the extra index) shows here. 2000 single-row writes in one
 * transaction, rolled back; in operations per second.
 */
const uncommitted =
  (write: (side: Side, tx: unknown, i: number, run: string) => Promise<unknown>): Path =>
  async (side) => {
    const sql = side.api.fromPg(pool);
    const run = randomBytes(4).toString('hex');
    const count = 2000;
    const started = performance.now();
    await sql
      .transaction(async (tx: unknown) => {
        for (let i = 0; i < count; i++) await write(side, tx, i, run);
        throw rollback;
      })
      .catch((error: unknown) => {
        if (error !== rollback) throw error;
      });
    return count / ((performance.now() - started) / 1000);
  };
const rollback = new Error('rollback');
const handles = new Map<Side, Api>();
const handlesOf = (side: Side): Api => {
  let h = handles.get(side);
  if (!h) {
    const sql = side.api.fromPg(pool);
    const common = { sql, schema: side.schema };
    h = {
      outbox: side.api.createOutbox({ ...common, notify: false }),
      inbox: side.api.createInbox(common),
      claims: side.api.createClaims(common),
    };
    handles.set(side, h);
  }
  return h;
};
const tenantOf = (side: Side) => (side.tenant ? { tenant: side.tenant } : {});
paths['outbox add, uncommitted (ops/s)'] = uncommitted((side, tx, i) =>
  handlesOf(side).outbox.add(tx, {
    topic: 'bench',
    key: `order-${i % 1000}`,
    type: 'order.updated',
    payload: { i, amount: 1250 },
    ...tenantOf(side),
  }),
);
paths['inbox record, uncommitted (ops/s)'] = uncommitted((side, tx, i, run) =>
  handlesOf(side).inbox.record(tx, { consumer: 'billing', messageId: `${run}-${i}`, ...tenantOf(side) }),
);
paths['claims enqueue, uncommitted (ops/s)'] = uncommitted((side, tx, i, run) => {
  const { claims } = handlesOf(side);
  const spec = { tenant: side.tenant ?? 'acme', queue: 'q', key: `${run}-${i}`, payload: { i } };
  // The tree before the API's 1.0 renames took the transaction last.
  return claims.enqueueIn ? claims.enqueueIn(tx, spec) : claims.enqueue(spec, tx);
});

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
console.log(
  `tenant keys: ${rounds} alternating rounds, ${durationMs / 1000} s closed loops, load average ${(
    await import('node:os')
  )
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`,
);
try {
  for (const [name, path] of Object.entries(paths).filter(([name]) => name.includes(values.only ?? ''))) {
    const samples = sides.map(() => [] as number[]);
    for (let r = 0; r < rounds; r++) {
      // Alternate the order too, so a drift in the machine's load does not favour one side.
      const order = r % 2 === 0 ? sides.map((_, i) => i) : sides.map((_, i) => sides.length - 1 - i);
      for (const i of order) samples[i]!.push(await path(sides[i]!));
    }
    const base = median(samples[0]!);
    console.log(`\n${name}`);
    sides.forEach((side, i) => {
      const m = median(samples[i]!);
      console.log(
        `  ${side.name.padEnd(24)} median ${round(m, 0).toString().padStart(7)}  ×${round(m / base, 3)}  rounds ${samples[i]!.map((x) => round(x, 0)).join(' ')}`,
      );
    });
  }
} finally {
  // Also after a failed round: the schemas are this run's own.
  for (const schema of new Set(sides.map((s) => s.schema)))
    await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  await pool.end();
}
