/**
 * The schema can be distributed on `tenant_id` (Citus and its kind), checked on plain PostgreSQL:
 *
 * 1. Every idem table (all but the migrations bookkeeping) has `tenant_id`, every primary key and
 *    unique index includes it (leading), and every foreign key carries it.
 * 2. Every statement of every module either touches one tenant's rows, or is one of the
 *    statements listed below as across tenants, each with why. "One tenant's rows" is read from
 *    PostgreSQL's own generic plan of the statement (EXPLAIN of the prepared statement with
 *    `plan_cache_mode = force_generic_plan`): every scan of an idem table carries
 *    `tenant_id = $n`, all with the same `$n` (PostgreSQL derives the pin through joins on
 *    tenant_id, as a distributed planner does), and every INSERT names tenant_id. A new statement
 *    that reads, updates or deletes rows of several tenants fails here until it is pinned or
 *    listed. A listed statement that became pinned fails too, so the list stays true.
 * 3. `idem sql --citus` distributes exactly these tables, referenced tables first, colocated;
 *    run here against a stand-in `create_distributed_table` that checks each call.
 * 4. Everything the request paths and the workers scoped to tenants send, recorded while they run
 *    (keyed operations, outbox and dispatcher, inbox, receiver and processor with an order-aware
 *    entity and a gap, sender, claims and its worker, every sweep), is among the pinned
 *    statements: a worker scoped to tenants never falls back to a statement across tenants.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { renderClaimStatements } from '../../src/claims/statements.js';
import { createClaims, createClaimsWorker } from 'idem/claims';
import { createManualClock } from 'idem/testing';
import { createIdem, migrationScript, quoteSchema, type Row, type Sql, type Transaction } from 'idem';
import { createInbox } from 'idem/inbox';
import { renderInboxStatements } from '../../src/inbox/statements.js';
import { citusScript, distributedTables } from '../../src/migrate/citus.js';
import { renderStatements } from '../../src/operations/statements.js';
import { createInDatabasePublisher, createOutbox, createOutboxDispatcher, type Publisher } from 'idem/outbox';
import { renderOutboxStatements } from '../../src/outbox/statements.js';
import {
  createStandardWebhooksVerifier,
  createWebhookProcessor,
  createWebhookReceiver,
  createWebhookSender,
  recordHeaders,
} from 'idem/webhooks';
import { listParkedEntities } from '../../src/webhooks/entities.js';
import { renderSenderStatements } from '../../src/webhooks/sender/statements.js';
import { renderReceiptStatements } from '../../src/webhooks/statements.js';
import { createSagas } from 'idem/workflow';
import { renderSagaStatements } from '../../src/workflow/statements.js';
import { createTestSchema, type TestSchema } from '../support/database.js';
import { signStandard, standardSecret } from '../webhooks/support.js';
import { recordingEndpoint } from '../support/http/endpoint.js';

/** The options of a query (`Sql.query`'s third parameter). */
type QueryOptions = Parameters<Sql['query']>[2];

/**
 * Statements that read or write rows of every tenant, with why. They serve workers and sweeps
 * that are not scoped to tenants (one PostgreSQL, or one cell) and operator tools; each worker and
 * sweep has a pinned form for a distributed database (`tenants`), checked in part 3.
 */
const acrossTenants: Record<string, Record<string, string>> = {
  operations: {
    sweepBodies: 'sweeper across every tenant (sweepBodiesTenant is its pinned form)',
    sweepRows: 'sweeper across every tenant (sweepRowsTenant)',
  },
  inbox: {
    sweep: 'sweeper across every tenant (sweepTenant)',
    stats: 'operator counts, per consumer, of every tenant',
  },
  outbox: {
    claim: 'dispatcher without `tenants` (claimTenant)',
    mark: 'marks a batch that spans tenants, by (tenant, id) pairs (markTenant for one tenant)',
    markDeleting: 'as mark (markDeletingTenant)',
    markMoved:
      'marks events of a batch that spans tenants whose row moved, by (tenant, id) pairs (markMovedTenant)',
    markMovedDeleting: 'as markMoved (markMovedDeletingTenant)',
    redrive: 'operator redrive without a tenant (redriveTenant)',
    cleanup: 'dispatcher cleanup without `tenants` (cleanupTenant)',
    cleanupCaptured: 'as cleanup (cleanupCapturedTenant)',
    stats: 'operator counts, of every tenant or one',
    listDead: 'operator list, of every tenant or one',
  },
  webhooks: {
    claim: 'processor without `tenants` (claimTenant)',
    redrive: 'operator redrive without a tenant (redriveTenant)',
    sweep: 'sweeper across every tenant (sweepTenant)',
    list: 'operator list, of every tenant or one',
    parked: 'operator list of parked entities, of every tenant or one',
  },
  sender: {
    claim: 'sender without `tenants` (claimTenant)',
    redrive: 'operator redrive without a tenant (redriveTenant)',
    deliveries: 'operator list, of every tenant or one',
    sweep: 'sweeper across every tenant (sweepTenant)',
  },
  claims: {
    existingMany: 'enqueueMany of tasks of several tenants (existingManyTenant for one)',
    claim: 'a claim without a tenant (claimTenant)',
    completeAndClaim: 'a worker without a tenant (completeAndClaimTenant)',
    completeOneAndClaimOne:
      "a worker's slot without `tenants`: its task's tenant, the next task any tenant's (a worker with `tenants` claims through claimTenant)",
    completeOneThenClaimOne:
      "a worker's slot without `tenants`, as completeOneAndClaimOne (claiming only for a completed task): its task's tenant, the next task any tenant's",
    completeMany: 'a batch of several tenants, by (tenant, id) pairs (completeManyTenant for one)',
    byId: 'get(id) without a tenant (byIdTenant)',
    dead: 'operator list, of every tenant or one',
    redrive: 'redrive(id) without a tenant (redriveTenant)',
    sweep: 'sweeper across every tenant (sweepTenant)',
  },
  sagas: {
    list: 'operator list of every tenant',
    sweep: 'sweeper across every tenant (sweepTenant)',
    lapsed: 'saga recovery across every tenant: not scoped to tenants yet',
  },
};

interface Verdict {
  pinned: boolean;
  why: string;
}

let db: TestSchema;
let s: string;
/** Every module's statements, by module and name. */
let modules: Record<string, Record<string, string>>;
/** The verdict of each statement text. */
const verdicts = new Map<string, Verdict & { module: string; name: string }>();
let idemTables: string[];

beforeAll(async () => {
  db = await createTestSchema();
  s = quoteSchema(db.schema);
  // The LISTEN channel's name, and the dispatcher's pg_notify self-test: no table in either.
  const notTableStatements = new Set(['channel', 'selfTest']);
  const texts = (all: object) =>
    // A statement is a typed function holding its text (core/statement.ts), or still a text.
    Object.fromEntries(
      Object.entries(all as Record<string, unknown>)
        .map(([key, value]): [string, unknown] => [
          key,
          typeof value === 'function' ? (value as { text?: unknown }).text : value,
        ])
        .filter(
          (entry): entry is [string, string] =>
            typeof entry[1] === 'string' && !notTableStatements.has(entry[0]),
        ),
    );
  modules = {
    operations: texts(renderStatements(db.schema)),
    inbox: texts(renderInboxStatements(db.schema)),
    outbox: texts(renderOutboxStatements(db.schema)),
    webhooks: texts(renderReceiptStatements(db.schema)),
    sender: texts(renderSenderStatements(db.schema)),
    claims: texts(renderClaimStatements(db.schema)),
    sagas: texts(renderSagaStatements(db.schema)),
  };
  const { rows } = await db.pool.query<{ relname: string }>(
    `SELECT relname FROM pg_class WHERE relnamespace = $1::regnamespace AND relkind = 'r'
      AND relname <> 'migrations' ORDER BY relname`,
    [db.schema],
  );
  idemTables = rows.map((r) => r.relname);
  const client = await db.pool.connect();
  try {
    await client.query(`SET plan_cache_mode = force_generic_plan`);
    for (const [module, statements] of Object.entries(modules)) {
      for (const [name, text] of Object.entries(statements)) {
        verdicts.set(text, { module, name, ...(await judge(client, text)) });
      }
    }
  } finally {
    client.release();
  }
});

afterAll(async () => {
  await db.close();
});

/** The verdict on one statement, from its generic plan. */
async function judge(
  client: { query: (text: string, params?: unknown[]) => Promise<{ rows: Row[] }> },
  text: string,
): Promise<Verdict> {
  await client.query(`PREPARE distribution_check AS ${text}`);
  try {
    const { rows } = await client.query(
      `SELECT cardinality(parameter_types) AS n FROM pg_prepared_statements WHERE name = 'distribution_check'`,
    );
    const n = Number(rows[0]!.n);
    const args = Array.from({ length: n }, () => 'NULL').join(', ');
    const plan = await client.query(
      `EXPLAIN (VERBOSE, FORMAT JSON) EXECUTE distribution_check${n > 0 ? `(${args})` : ''}`,
    );
    return verdictOf(text, (plan.rows[0]!['QUERY PLAN'] as [{ Plan: PlanNode }])[0].Plan);
  } finally {
    await client.query(`DEALLOCATE distribution_check`);
  }
}

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  Schema?: string;
  Operation?: string;
  Plans?: PlanNode[];
  [condition: string]: unknown;
}

const conditions = ['Index Cond', 'Filter', 'Recheck Cond', 'TID Cond'];
/** A conjunct that pins the tenant: `tenant_id = $n` (or `$n = tenant_id`), with or without an alias. */
const pin = /^(?:\w+\.)?tenant_id = \$(\d+)$|^\$(\d+) = (?:\w+\.)?tenant_id$/;

/** The top-level AND terms of a plan's condition: `((a = $1) AND ((b) OR (c)))` → `a = $1`, `(b) OR (c)`. */
function conjuncts(condition: string): string[] {
  let c = condition.trim();
  while (c.startsWith('(') && closing(c, 0) === c.length - 1) c = c.slice(1, -1).trim();
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < c.length; i++) {
    if (c[i] === '(') depth++;
    else if (c[i] === ')') depth--;
    else if (depth === 0 && c.startsWith(' AND ', i)) {
      parts.push(c.slice(start, i));
      start = i + 5;
    }
  }
  if (parts.length === 0) return [c];
  parts.push(c.slice(start));
  return parts.flatMap(conjuncts);
}

/** The index of the parenthesis that closes the one at `open`. */
function closing(text: string, open: number): number {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === '(') depth++;
    else if (text[i] === ')' && --depth === 0) return i;
  }
  return -1;
}

function verdictOf(text: string, root: PlanNode): Verdict {
  const params = new Set<string>();
  const unpinned: string[] = [];
  let inserts = 0;
  const visit = (node: PlanNode) => {
    const relation = node['Relation Name'];
    const ours = relation !== undefined && node.Schema === db.schema && idemTables.includes(relation);
    if (ours && node['Node Type'] === 'ModifyTable' && node.Operation === 'Insert') {
      inserts++;
      const columns = new RegExp(`INSERT INTO ${escape(s)}\\.${relation}(?: AS \\w+)?\\s*\\(([^)]*)\\)`).exec(
        text,
      );
      if (!columns || !/\btenant_id\b/.test(columns[1]!))
        unpinned.push(`INSERT INTO ${relation} without tenant_id`);
    } else if (ours && node['Node Type'] !== 'ModifyTable') {
      const found = conditions
        .map((c) => node[c])
        .filter((c): c is string => typeof c === 'string')
        .flatMap(conjuncts)
        .map((c) => pin.exec(c))
        .filter((m): m is RegExpExecArray => m !== null)
        .map((m) => m[1] ?? m[2]!);
      if (found.length === 0) unpinned.push(`${node['Node Type']} on ${relation}`);
      for (const p of found) params.add(p);
    }
    for (const child of node.Plans ?? []) visit(child);
  };
  visit(root);
  if (unpinned.length > 0) return { pinned: false, why: unpinned.join('; ') };
  if (params.size > 1)
    return { pinned: false, why: `pinned to several tenants: $${[...params].join(', $')}` };
  if (params.size === 0 && inserts === 0) return { pinned: false, why: 'touches no idem table' };
  return { pinned: true, why: params.size === 0 ? 'inserts only' : `tenant_id = $${[...params][0]}` };
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

describe('a schema distributable on tenant_id', () => {
  it('every table has tenant_id, and every primary key, unique index and foreign key includes it', async () => {
    expect(idemTables).toEqual(
      expect.arrayContaining([
        'inbox',
        'outbox',
        'webhook_receipts',
        'webhook_deliveries',
        'tasks',
        'task_keys',
      ]),
    );
    const { rows: withoutTenant } = await db.pool.query<{ relname: string }>(
      `SELECT c.relname FROM pg_class c
        WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'r' AND c.relname <> 'migrations'
          AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id'
                          AND a.atttypid = 'text'::regtype AND a.attnotnull)`,
      [db.schema],
    );
    expect(withoutTenant).toEqual([]);

    // Unique indexes (primary keys and unique constraints are backed by one): tenant_id included,
    // and first, so that the key's index also serves a tenant's rows.
    const { rows: unique } = await db.pool.query<{ index: string; columns: string[] }>(
      `SELECT i.indexrelid::regclass::text AS index,
          array(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
                JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.n)::text[] AS columns
        FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
        WHERE c.relnamespace = $1::regnamespace AND c.relname <> 'migrations' AND i.indisunique`,
      [db.schema],
    );
    expect(unique.length).toBeGreaterThanOrEqual(idemTables.length);
    expect(unique.filter((u) => u.columns[0] !== 'tenant_id')).toEqual([]);

    const { rows: foreign } = await db.pool.query<{ name: string; columns: string[]; referenced: string[] }>(
      `SELECT conname AS name,
          array(SELECT attname FROM pg_attribute WHERE attrelid = conrelid AND attnum = ANY(conkey))::text[] AS columns,
          array(SELECT attname FROM pg_attribute WHERE attrelid = confrelid AND attnum = ANY(confkey))::text[] AS referenced
        FROM pg_constraint WHERE connamespace = $1::regnamespace AND contype = 'f'`,
      [db.schema],
    );
    expect(foreign.length).toBeGreaterThan(0);
    expect(
      foreign.filter((f) => !f.columns.includes('tenant_id') || !f.referenced.includes('tenant_id')),
    ).toEqual([]);
  });

  it('every statement touches one tenant, or is listed as across tenants with why', () => {
    // DUMP_VERDICTS=1 prints every statement's verdict, to see what the judge read.
    if (process.env.DUMP_VERDICTS)
      for (const v of verdicts.values()) console.log(`${v.module}.${v.name}: ${v.pinned} ${v.why}`);
    const unpinned = [...verdicts.values()]
      .filter((v) => !v.pinned && acrossTenants[v.module]?.[v.name] === undefined)
      .map((v) => `${v.module}.${v.name}: ${v.why}`);
    expect(unpinned).toEqual([]);
    // The list stays true: a listed statement that is pinned now must leave the list.
    const stale = Object.entries(acrossTenants).flatMap(([module, names]) =>
      Object.keys(names)
        .filter((name) => {
          const text = modules[module]?.[name];
          return text === undefined || verdicts.get(text)?.pinned !== false;
        })
        .map((name) => `${module}.${name}`),
    );
    expect(stale).toEqual([]);
    // A sanity check of the judge itself: the hot statements are judged pinned.
    for (const [module, name] of [
      ['outbox', 'claimTenant'],
      ['outbox', 'markTenant'],
      ['inbox', 'record'],
      ['claims', 'claimTenant'],
      ['claims', 'complete'],
      ['webhooks', 'insert'],
      ['webhooks', 'applyVersion'],
      ['sender', 'claimTenant'],
    ] as const) {
      expect(verdicts.get(modules[module]![name]!), `${module}.${name}`).toMatchObject({ pinned: true });
    }
    expect(verdicts.get(modules.outbox!.claim!)).toMatchObject({ pinned: false });
  });

  it('`idem sql --citus` prints the migrations, then distributes every table on tenant_id, colocated', async () => {
    expect([...distributedTables].sort()).toEqual(idemTables);
    // Referenced tables first: Citus distributes a table's foreign keys' targets before it.
    const { rows: foreign } = await db.pool.query<{ table: string; referenced: string }>(
      `SELECT conrelid::regclass::text AS table, confrelid::regclass::text AS referenced
        FROM pg_constraint WHERE connamespace = $1::regnamespace AND contype = 'f'`,
      [db.schema],
    );
    const position = (qualified: string) =>
      distributedTables.indexOf(qualified.split('.').pop()! as (typeof distributedTables)[number]);
    for (const f of foreign) expect(position(f.referenced), f.table).toBeLessThan(position(f.table));

    // The real command: the plain script, then the distribution.
    const main = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
    const { stdout } = await promisify(execFile)(process.execPath, [
      '--import',
      'tsx',
      main,
      'sql',
      '--schema',
      db.schema,
      '--citus',
    ]);
    expect(stdout).toBe(`${migrationScript(db.schema)}\n${citusScript(db.schema)}`);

    // The distribution part against a stand-in that checks each call as Citus would need it:
    // the table exists, the column is tenant_id, every table but the first is colocated with it.
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`CREATE TEMP TABLE distributed (relation regclass, colocate_with text)`);
      await client.query(`CREATE FUNCTION pg_temp.create_distributed_table(
          relation regclass, column_name text, colocate_with text DEFAULT 'default') RETURNS void
        LANGUAGE plpgsql AS $$ BEGIN
          IF column_name <> 'tenant_id' THEN RAISE EXCEPTION 'distributed on %', column_name; END IF;
          INSERT INTO distributed VALUES (relation, colocate_with);
        END $$`);
      const script = citusScript(db.schema).replaceAll(
        'create_distributed_table(',
        'pg_temp.create_distributed_table(',
      );
      await client.query(script);
      const { rows } = await client.query<{ relation: string; colocate_with: string }>(
        `SELECT relation::text, colocate_with FROM distributed`,
      );
      expect(rows.map((r) => r.relation.split('.').pop())).toEqual([...distributedTables]);
      expect(rows.slice(1).every((r) => r.colocate_with === `${s}.requests`)).toBe(true);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
  });

  it('request paths and workers scoped to tenants send only statements pinned to one tenant', async () => {
    const clock = createManualClock({ startMs: Date.parse('2026-03-01T00:00:00Z') });
    const sent = new Set<string>();
    const sql = recording(fromPg(db.pool), sent);
    // The test's own checks (operator reads across tenants) go around the recording.
    const plain = fromPg(db.pool);
    const tenants = ['acme', 'globex'];
    const schema = db.schema;

    // Keyed operations whose handlers add events and enqueue tasks.
    const idem = createIdem({ sql, schema, clock });
    const outbox = createOutbox({ sql, schema, clock });
    const claims = createClaims({ sql, schema, clock });
    for (const tenant of tenants) {
      for (let i = 0; i < 3; i++) {
        await idem.run({ tenant, operation: 'pay', key: `pay-${i}`, request: { i } }, async (tx) => {
          await outbox.add(tx, { tenant, topic: 'payments', key: `p-${i}`, type: 'paid', payload: { i } });
          await outbox.addMany(tx, [
            { tenant, topic: 'payments', key: `p-${i}`, type: 'noted', payload: {} },
          ]);
          await claims.enqueueIn(tx, { tenant, queue: 'receipts', key: `r-${i}`, payload: { i } });
          return { i };
        });
      }
      await claims.enqueueMany([
        { tenant, queue: 'receipts', key: 'r-0', payload: { i: 0 } },
        { tenant, queue: 'receipts', key: 'r-9', payload: { i: 9 } },
      ]);
    }

    // The dispatcher scoped to tenants, into the inbox (the first publish of each key fails once).
    const inbox = createInbox({ sql, schema, clock });
    let failures = 0;
    const inDatabase = createInDatabasePublisher({
      inbox,
      subscribers: [{ consumer: 'ledger', handler: async () => {} }],
    });
    const publisher: Publisher = {
      publish: async (events, signal) =>
        failures++ === 0
          ? events.map((e) => ({ id: e.id, ok: false as const, error: new Error('once') }))
          : inDatabase.publish(events, signal),
    };
    const dispatcher = createOutboxDispatcher({
      sql,
      schema,
      clock,
      publisher,
      tenants,
      backoff: { baseMs: 1 },
    });
    await dispatcher.drain();
    clock.advance(10_000);
    const dispatched = await dispatcher.drain();
    expect(dispatched.published).toBeGreaterThan(0);
    expect((await createOutbox({ sql: plain, schema }).stats()).pending).toBe(0);
    await inbox.handle({ tenant: 'acme', consumer: 'ledger', messageId: 'm-1' }, async () => {});
    await inbox.handle({ tenant: 'acme', consumer: 'ledger', messageId: 'm-1' }, async () => {});
    await inbox.markDead({ tenant: 'acme', consumer: 'ledger', messageId: 'm-2', attempts: 3, error: 'x' });
    await inbox.get({ tenant: 'acme', consumer: 'ledger', messageId: 'm-2' });

    // Webhooks: a receiver source per tenant, order-aware processing with a gap and a skip.
    const receiver = createWebhookReceiver({
      sql,
      schema,
      clock,
      sources: Object.fromEntries(
        tenants.map((tenant) => [
          `billing-${tenant}`,
          { verifier: createStandardWebhooksVerifier({ secrets: [standardSecret] }), tenant },
        ]),
      ),
    });
    for (const tenant of tenants) {
      for (const [id, version] of [
        ['d1', 1],
        ['d3', 3],
        ['d1-again', 1],
      ] as const) {
        const signed = signStandard({
          id,
          body: JSON.stringify({ type: 'refund', entity: 'ch_1', version }),
          timestampMs: clock.now(),
        });
        await receiver.receive(`billing-${tenant}`, {
          headers: recordHeaders(signed.headers),
          body: signed.body,
        });
      }
    }
    const handle = {
      ordering: 'sequence' as const,
      entity: (e: { json<T>(): T }) => {
        const body = e.json<{ entity: string; version: number }>();
        return { key: body.entity, version: body.version, scope: 'charges' };
      },
      gapTimeoutMs: 1000,
      handle: async () => {},
    };
    const processor = createWebhookProcessor({
      sql,
      schema,
      clock,
      tenants,
      // One at a time: receipts of one entity handled concurrently put each other back to wait.
      concurrency: 1,
      handlers: Object.fromEntries(tenants.map((t) => [`billing-${t}`, { refund: handle }])),
    });
    await processor.drain();
    clock.advance(5000);
    await processor.drain();
    expect((await listParkedEntities(plain, { schema })).map((p) => p.tenant).sort()).toEqual(tenants);
    for (const tenant of tenants) await processor.skip({ tenant, scope: 'charges', key: 'ch_1' });
    await processor.drain();

    // The sender: each tenant's endpoint gets that tenant's message only.
    const server = await recordingEndpoint(200);
    const { received } = server;
    try {
      const sender = createWebhookSender({
        sql,
        schema,
        clock,
        tenants,
        allowedDestinations: ['127.0.0.1'],
      });
      for (const tenant of tenants) {
        await sender
          .endpointsOf(tenant)
          .create({ id: 'main', url: `${server.url}/${tenant}`, secrets: [standardSecret] });
        await sender.enqueue(sql, { tenant, id: 'msg-1', type: 'invoice.paid', payload: { tenant } });
      }
      await sender.drain();
      await sender.deliver({ tenant: 'acme', id: 'msg-2', type: 'invoice.paid', payload: {} });
      await sender.listAttempts({ messageId: 'msg-1', endpointId: 'main', tenant: 'acme' });
      await sender.endpointsOf('acme').update('main', { eventTypes: null });
      await sender.endpointsOf('acme').disable('main', 'test');
      await sender.endpointsOf('acme').enable('main');
      await sender.redrive({ tenant: 'acme', states: ['cancelled'] });
      expect(received.sort()).toEqual(['/acme', '/acme', '/globex']);
    } finally {
      await server.close();
    }

    // Claims: a worker scoped to tenants; heartbeats, failures, batches of one tenant.
    let done = 0;
    let allDone!: () => void;
    const eight = new Promise<void>((resolve) => (allDone = resolve));
    const worker = createClaimsWorker({
      claims,
      queue: 'receipts',
      handler: async () => {
        if (++done >= 8) allDone();
        return null;
      },
      tenants,
      pollIntervalMs: 1,
    });
    await worker.start();
    await eight;
    await worker.stop();
    await claims.enqueue({ tenant: 'acme', queue: 'mail', key: 'm-1', payload: {} });
    await claims.enqueue({ tenant: 'acme', queue: 'mail', key: 'm-2', payload: {} });
    const [task] = await claims.claim('mail', { tenant: 'acme' });
    await claims.heartbeat(task!);
    await claims.fail(task!, new Error('no'), { retryable: false });
    await claims.redrive(task!.id, { tenant: 'acme' });
    await claims.get({ id: task!.id, tenant: 'acme' });
    await claims.get({ tenant: 'acme', queue: 'mail', key: 'm-1' });
    const batch = await claims.claim('mail', { tenant: 'acme', limit: 5 });
    await claims.completeMany(batch);
    const next = await claims.completeAndClaim([], 'mail', { tenant: 'acme' });
    await claims.release(next.claimed[0] ?? batch[0]!);

    // Every sweep, scoped to tenants, with everything past its retention.
    clock.advance(400 * 86_400_000);
    await idem.sweep({ tenants });
    await inbox.sweep({ tenants });
    await outbox.sweep({ tenants, olderThanMs: 0 });
    await processor.sweep();
    await claims.sweep({ tenants });
    await createWebhookSender({ sql, schema, clock, tenants }).sweep({ olderThanMs: 0 });
    await createSagas({ sql, schema, clock }).sweep({ tenants });

    const ours = [...sent].filter((text) => text.includes(s));
    expect(ours.length).toBeGreaterThan(40);
    const across = ours
      .map(
        (text) =>
          verdicts.get(text) ?? {
            module: '?',
            name: text.slice(0, 120),
            pinned: false,
            why: 'not a module statement',
          },
      )
      .filter((v) => !v.pinned)
      .map((v) => `${v.module}.${v.name}: ${v.why}`);
    expect(across).toEqual([]);
    // And the scenario really covered the workers' pinned forms.
    const used = new Set(
      ours.map((text) => verdicts.get(text)).map((v) => (v ? `${v.module}.${v.name}` : '')),
    );
    for (const name of [
      'outbox.claimTenant',
      'outbox.markTenant',
      'outbox.cleanupTenant',
      'inbox.record',
      'inbox.sweepTenant',
      'webhooks.claimTenant',
      'webhooks.park',
      'webhooks.skipAdvance',
      'webhooks.sweepTenant',
      'sender.claimTenant',
      'sender.sweepTenant',
      'claims.claimTenant',
      'claims.completeManyTenant',
      'claims.completeAndClaimTenant',
      'claims.existingManyTenant',
      'claims.sweepTenant',
      'operations.sweepRowsTenant',
      'sagas.sweepTenant',
    ]) {
      expect(used.has(name), name).toBe(true);
    }
  });
});

/** An `Sql` that records the text of every statement sent through it (and its transactions). */
function recording<C>(inner: Sql<C>, sent: Set<string>): Sql<C> {
  const wrap = <Q extends { query: Sql<C>['query'] }>(target: Q) =>
    ((text: string, params?: readonly unknown[], options?: QueryOptions) => {
      sent.add(text);
      return target.query(text, params, options);
    }) as Sql<C>['query'];
  return {
    query: wrap(inner),
    transaction: <T>(fn: (tx: Transaction<C>) => Promise<T>) =>
      inner.transaction((tx) => fn({ client: tx.client, query: wrap(tx) })),
  };
}
