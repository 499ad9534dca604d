/**
 * `idem sweep` on a real PostgreSQL: a fresh schema holds, in every table with a retention, rows
 * written 60 days ago (past every default retention) beside rows written now and rows the sweep
 * must keep whatever their age (an unpublished event, a pending receipt, a message with a delivery
 * still due, a key whose result expired but whose tombstone holds, a saga still running). The sweep
 * deletes exactly the expired ones, table by table, and says how many.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createClaims } from 'idem/claims';
import { run } from '../../src/cli/commands/sweep.js';
import { createManualClock } from 'idem/testing';
import { type Clock, createIdem } from 'idem';
import { createInbox } from 'idem/inbox';
import { createOutbox, createOutboxDispatcher } from 'idem/outbox';
import {
  createStandardWebhooksVerifier,
  createWebhookProcessor,
  createWebhookReceiver,
  createWebhookSender,
  recordHeaders,
} from 'idem/webhooks';
import { createSagas, defineSaga, step } from 'idem/workflow';
import { RecordingPublisher } from '../outbox/support.js';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { signStandard, standardSecret } from '../webhooks/support.js';
import { printedBy } from '../support/console-output.js';

/** Every table `idem sweep` covers, as its output names them. */
const everyTable = ['requests', 'inbox', 'outbox', 'webhook-receipts', 'tasks', 'webhook-messages', 'sagas'];

const day = 86_400_000;
const schemas: TestSchema[] = [];
beforeAll(() => {
  process.env.DATABASE_URL = databaseUrl();
});
afterEach(async () => {
  await Promise.all(schemas.splice(0).map((s) => s.close()));
});

/** Row counts of every table the sweep touches, and of the rows that must survive it. */
interface Counts {
  requests: number;
  requestsWithResult: number;
  steps: number;
  inbox: number;
  outbox: number;
  receipts: number;
  tasks: number;
  taskKeys: number;
  messages: number;
  sagas: number;
  sagaSteps: number;
}

async function counts(db: TestSchema): Promise<Counts> {
  const s = `"${db.schema}"`;
  const { rows } = await db.pool.query<Counts>(
    `SELECT (SELECT count(*)::int FROM ${s}.requests) AS "requests",
            (SELECT count(*)::int FROM ${s}.requests WHERE result IS NOT NULL) AS "requestsWithResult",
            (SELECT count(*)::int FROM ${s}.steps) AS "steps",
            (SELECT count(*)::int FROM ${s}.inbox) AS "inbox",
            (SELECT count(*)::int FROM ${s}.outbox) AS "outbox",
            (SELECT count(*)::int FROM ${s}.webhook_receipts) AS "receipts",
            (SELECT count(*)::int FROM ${s}.tasks) AS "tasks",
            (SELECT count(*)::int FROM ${s}.task_keys) AS "taskKeys",
            (SELECT count(*)::int FROM ${s}.webhook_messages) AS "messages",
            (SELECT count(*)::int FROM ${s}.sagas) AS "sagas",
            (SELECT count(*)::int FROM ${s}.saga_steps) AS "sagaSteps"`,
  );
  return rows[0]!;
}

/**
 * Writes through each module's own API, on a clock 60 days back for the expired rows and on the
 * wall clock for the live ones: per table, `expired` rows past retention and one live row, plus
 * the rows that are kept whatever their age.
 */
async function fill(db: TestSchema, expired: number): Promise<void> {
  const { pool, schema } = db;
  const sql = fromPg(pool);
  const old = createManualClock({ startMs: Date.now() - 60 * day });
  const now: Clock = { now: () => Date.now(), sleep: (ms) => new Promise((r) => setTimeout(r, ms)) };
  const times: [Clock, number][] = [
    [old, expired],
    [now, 1],
  ];

  // Keyed operations, each with a recorded step; one more whose result (7 days) expired but whose
  // tombstone (30 days) holds: its result is cleared, the row kept.
  for (const [clock, n] of [...times, [createManualClock({ startMs: Date.now() - 10 * day }), 1] as const]) {
    const idem = createIdem({ sql, schema, clock });
    for (let i = 0; i < n; i++) {
      await idem.steps({ tenant: 't', operation: 'pay', key: `k-${clock.now()}-${i}` }, (op) =>
        op.step('charge', async () => ({ charged: i })),
      );
    }
  }

  for (const [clock, n] of times) {
    const inbox = createInbox({ sql, schema, clock });
    for (let i = 0; i < n; i++) {
      await inbox.handle({ consumer: 'ledger', messageId: `m-${clock.now()}-${i}` }, async () => undefined);
    }
  }

  // Outbox: published rows; an old event never published is kept (it is not delivered yet).
  for (const [clock, n] of times) {
    const outbox = createOutbox({ sql, schema, clock });
    const events = Array.from({ length: n }, (_, i) => ({
      topic: 'payments',
      key: `p${i}`,
      type: 'paid',
      payload: i,
    }));
    await sql.transaction((tx) => outbox.addMany(tx, events));
    await createOutboxDispatcher({
      sql,
      schema,
      clock,
      publisher: new RecordingPublisher(),
      topics: ['payments'],
    }).drain();
  }
  await sql.transaction((tx) =>
    createOutbox({ sql, schema, clock: old }).add(tx, {
      topic: 'parked',
      key: 'x',
      type: 'kept',
      payload: 0,
    }),
  );

  // Webhook receipts, applied; an old one still pending is kept (it is not processed yet).
  for (const [clock, n] of times) {
    const receiver = createWebhookReceiver({
      sql,
      schema,
      clock,
      sources: { billing: createStandardWebhooksVerifier({ secrets: [standardSecret] }) },
    });
    for (let i = 0; i < n; i++) {
      const signed = signStandard({
        id: `d-${clock.now()}-${i}`,
        body: JSON.stringify({ type: 'charge.refunded', i }),
        timestampMs: clock.now(),
      });
      const answer = await receiver.receive('billing', {
        headers: recordHeaders(signed.headers),
        body: signed.body,
      });
      expect(answer.status).toBe(202);
    }
    await createWebhookProcessor({
      sql,
      schema,
      clock,
      handlers: { billing: { '*': async () => undefined } },
    }).drain();
  }
  const pending = signStandard({ id: 'd-pending', body: '{"type":"late"}', timestampMs: old.now() });
  await createWebhookReceiver({
    sql,
    schema,
    clock: old,
    sources: { billing: createStandardWebhooksVerifier({ secrets: [standardSecret] }) },
  }).receive('billing', { headers: recordHeaders(pending.headers), body: pending.body });

  // Claims tasks, completed (each with its dedupe key).
  for (const [clock, n] of times) {
    const claims = createClaims({ sql, schema, clock });
    for (let i = 0; i < n; i++) {
      await claims.enqueue({ tenant: 't', queue: 'notify', key: `n-${clock.now()}-${i}`, payload: i });
    }
    for (const task of await claims.claim('notify', { limit: n })) await claims.complete(task);
  }

  // Outgoing webhook messages with no subscriber; an old one whose delivery is still due is kept.
  for (const [clock, n] of times) {
    const sender = createWebhookSender({ sql, schema, clock });
    for (let i = 0; i < n; i++) {
      await sender.enqueue(sql, { id: `w-${clock.now()}-${i}`, type: 'nobody.listens', payload: { i } });
    }
  }
  const oldSender = createWebhookSender({ sql, schema, clock: old });
  await oldSender.endpoints.create({
    url: 'https://subscriber.example/hooks', // never delivered to: only its due delivery matters
    secrets: [standardSecret],
    eventTypes: ['someone.listens'],
  });
  await oldSender.enqueue(sql, { id: 'w-due', type: 'someone.listens', payload: {} });

  // Sagas of two steps, completed; an old one that crashed before its second step is kept.
  const saga = defineSaga<{ n: number }>({
    name: 'welcome',
    steps: [
      step({ name: 'account', action: async ({ input }) => input.n }),
      step({ name: 'mail', action: async () => 'sent' }),
    ],
  });
  for (const [clock, n] of times) {
    const sagas = createSagas({ sql, schema, clock });
    for (let i = 0; i < n; i++)
      await sagas.run(saga, { tenant: 't', key: `s-${clock.now()}-${i}`, input: { n: i } });
  }
  const crashing = createSagas({
    sql,
    schema,
    clock: old,
    hooks: {
      at: (point) => {
        if (point.at === 'action:before' && point.step === 'mail') throw new Error('crash');
      },
    },
  });
  await expect(crashing.run(saga, { tenant: 't', key: 's-running', input: { n: 0 } })).rejects.toThrow(
    'crash',
  );
}

const capture = (argv: string[]) => printedBy(() => run(argv));

/** The count printed on a table's line, e.g. `inbox: deleted 3 rows` → 3. */
function printed(out: string, table: string, what = 'deleted'): number {
  const line = out.split('\n').find((l) => l.startsWith(`${table}:`));
  const match = line && new RegExp(`${what} (\\d+)`).exec(line);
  if (!match) throw new Error(`no "${what}" count for ${table} in:\n${out}`);
  return Number(match[1]);
}

describe('idem sweep', () => {
  it('sweeps every table by default, through the real CLI: expired rows go, live and kept ones stay', async () => {
    const db = await createTestSchema();
    schemas.push(db);
    await fill(db, 3);
    const before = await counts(db);
    expect(before).toEqual({
      requests: 3 + 1 + 1,
      requestsWithResult: 5,
      steps: 5,
      inbox: 3 + 1,
      outbox: 3 + 1 + 1,
      receipts: 3 + 1 + 1,
      tasks: 3 + 1,
      taskKeys: 3 + 1,
      messages: 3 + 1 + 1,
      sagas: 3 + 1 + 1,
      sagaSteps: 2 * (3 + 1) + 2, // the crashed saga's second step is registered, not run
    });

    const main = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
    // Batches of 2 rows: every table takes more than one batch, with the pause between them.
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', main, 'sweep', '--schema', db.schema, '--batch-size', '2', '--pause-ms', '1'],
      { env: { ...process.env, DATABASE_URL: databaseUrl() } },
    );

    expect(await counts(db)).toEqual({
      requests: 2, // the live key and the one inside its tombstone
      requestsWithResult: 1, // the live key's; the other's result is cleared
      steps: 2,
      inbox: 1,
      outbox: 2, // the live published event and the old unpublished one
      receipts: 2, // the live applied receipt and the old pending one
      tasks: 1,
      taskKeys: 1,
      messages: 2, // the live message and the old one whose delivery is due
      sagas: 2, // the live one and the old one still running
      sagaSteps: 2 + 2,
    });
    expect(printed(stdout, 'requests', 'cleared')).toBe(4);
    expect(printed(stdout, 'requests')).toBe(3);
    expect(printed(stdout, 'inbox')).toBe(3);
    expect(printed(stdout, 'outbox')).toBe(3);
    expect(printed(stdout, 'webhook-receipts')).toBe(3);
    expect(printed(stdout, 'tasks')).toBe(3);
    expect(printed(stdout, 'webhook-messages')).toBe(3);
    expect(printed(stdout, 'sagas')).toBe(3);
    expect(stdout).toMatch(/^swept 7 tables in \d+\.\d\d s$/m);

    // A second sweep finds nothing more to do.
    const again = await capture(['--schema', db.schema]);
    expect(again.code).toBe(0);
    for (const table of everyTable) {
      expect(printed(again.out, table), table).toBe(0);
    }
  });

  it('--only sweeps the named tables and leaves the others as they are', async () => {
    const db = await createTestSchema();
    schemas.push(db);
    await fill(db, 2);
    const before = await counts(db);
    const result = await capture(['--schema', db.schema, '--only', 'tasks,inbox', '--pause-ms', '0']);
    expect(result.code).toBe(0);
    // In the sweep's order, whatever order --only gave.
    expect(result.out.split('\n').map((l) => l.split(':')[0])).toEqual([
      'inbox',
      'tasks',
      expect.stringMatching(/^swept 2 tables/),
    ]);
    expect(await counts(db)).toEqual({ ...before, inbox: 1, tasks: 1, taskKeys: 1 });
  });

  it('--outbox-retention-ms chooses how long published events are kept', async () => {
    const db = await createTestSchema();
    schemas.push(db);
    await fill(db, 2);
    // 90 days: the events published 60 days ago are still inside it.
    const kept = await capture([
      '--schema',
      db.schema,
      '--only',
      'outbox',
      '--outbox-retention-ms',
      String(90 * day),
    ]);
    expect(printed(kept.out, 'outbox')).toBe(0);
    // 0: every published event goes, the live one too; the unpublished one stays.
    const none = await capture(['--schema', db.schema, '--only', 'outbox', '--outbox-retention-ms', '0']);
    expect(printed(none.out, 'outbox')).toBe(3);
    expect((await counts(db)).outbox).toBe(1);
  });

  it('refuses unknown tables, bad numbers and a hostile schema name with one line and exit code 2, before connecting', async () => {
    const env = process.env.DATABASE_URL;
    // No database: a usage error must not need one.
    delete process.env.DATABASE_URL;
    try {
      for (const argv of [
        ['--only', 'requests,carts'],
        ['--only', ','],
        ['--batch-size', '0'],
        ['--pause-ms', '-1'],
        ['--schema', 'idem"; DROP SCHEMA public CASCADE; --'],
        ['--bogus'],
      ]) {
        const result = await capture(argv);
        expect(result.code, argv.join(' ')).toBe(2);
        expect(result.err, argv.join(' ')).toMatch(/^idem sweep: .+ \(idem sweep --help shows the usage\)$/);
      }
      const help = await capture(['--help']);
      expect(help.code).toBe(0);
      for (const table of everyTable) {
        expect(help.out).toContain(`  ${table} `);
      }
    } finally {
      if (env !== undefined) process.env.DATABASE_URL = env;
    }
  });
});
