/**
 * `idem sweep`: deletes what has outlived its retention in every idem table that has one, each in
 * bounded batches (one short statement per batch that skips locked rows), with a pause between
 * batches, and prints the count per table. `--only` picks tables. Run it from cron.
 */
import { createClaims } from '../../claims/claims.js';
import { systemClock } from '../../core/clock.js';
import type { SweepOptions, SweepResult } from '../../core/sweeper.js';
import { createInbox } from '../../inbox/inbox.js';
import { quoteSchema } from '../../core/schema-name.js';
import { createIdem } from '../../operations/idem.js';
import { createOutbox, defaultPublishedRetentionMs } from '../../outbox/outbox.js';
import { createWebhookSender, defaultMessagesRetentionMs } from '../../webhooks/sender/sender.js';
import { sweepReceipts } from '../../webhooks/sweep.js';
import { renderSagaStatements } from '../../workflow/statements.js';
import { sweepSagas } from '../../workflow/sweep.js';
import { parseCommand, usageError as commandUsageError } from '../args.js';
import { checkMigrated, openDatabase, type CliDatabase } from '../database.js';

const day = 86_400_000;
const defaultSagasRetentionMs = 30 * day;

/** What each table's sweep removes, in the order they run. */
const tables = {
  requests: 'keyed operations: results past resultMs cleared, keys past tombstoneMs deleted',
  inbox: 'message ids past the inbox retentionMs',
  outbox: 'events published longer ago than --outbox-retention-ms (unpublished, dead kept)',
  'webhook-receipts':
    'applied, superseded, duplicate, unhandled receipts past retentionMs (dead, waiting kept)',
  tasks: 'finished claims tasks past retentionMs, with their dedupe keys',
  'webhook-messages': 'messages older than --webhook-messages-retention-ms, all deliveries done',
  sagas: 'sagas finished longer ago than --sagas-retention-ms, with their steps',
} as const;

type Table = keyof typeof tables;
const tableNames = Object.keys(tables) as Table[];

const usage = `usage: idem sweep [--schema idem] [--only ${tableNames.join(',')}]
                  [--batch-size 1000] [--pause-ms 20]
                  [--outbox-retention-ms ${defaultPublishedRetentionMs}] [--webhook-messages-retention-ms ${defaultMessagesRetentionMs}]
                  [--sagas-retention-ms ${defaultSagasRetentionMs}]

Deletes what has outlived its retention, in every table below unless --only names some
(comma-separated). Each batch is one short statement that skips locked rows; --pause-ms between
batches leaves room for live traffic. Prints one line per table. The database is DATABASE_URL.
Keys, inbox ids, receipts and tasks carry the expiry their writer's retention options gave them;
the retention of published outbox events, webhook messages and finished sagas is chosen here.

${tableNames.map((name) => `  ${name.padEnd(17)} ${tables[name]}`).join('\n')}

Exit code 0; 1 if a table's sweep failed (the others still run); 2 for a usage error.`;

interface SweepSettings {
  schema: string;
  batchSize: number;
  pauseMs: number;
  outboxRetentionMs: number;
  messagesRetentionMs: number;
  sagasRetentionMs: number;
}

export async function run(argv: string[]): Promise<number> {
  const args = parseCommand('sweep', usage, argv, {
    schema: { type: 'string', default: 'idem' },
    only: { type: 'string' },
    'batch-size': { type: 'string', default: '1000' },
    // A short pause between batches leaves room for live traffic: flat out, a sweep halved
    // first-execution throughput beside it (0.53×, bench/scaling.bench.ts).
    'pause-ms': { type: 'string', default: '20' },
    'outbox-retention-ms': { type: 'string', default: String(defaultPublishedRetentionMs) },
    'webhook-messages-retention-ms': { type: 'string', default: String(defaultMessagesRetentionMs) },
    'sagas-retention-ms': { type: 'string', default: String(defaultSagasRetentionMs) },
  });
  if (args.exitCode !== undefined) return args.exitCode;
  const { values } = args;
  try {
    quoteSchema(values.schema);
  } catch (error) {
    return usageError(`--schema: ${(error as Error).message}`);
  }
  const selected = values.only === undefined ? tableNames : parseOnly(values.only);
  if (typeof selected === 'string') return usageError(selected);
  const batchSize = Number(values['batch-size']);
  const pauseMs = Number(values['pause-ms']);
  const outboxRetentionMs = Number(values['outbox-retention-ms']);
  const messagesRetentionMs = Number(values['webhook-messages-retention-ms']);
  const sagasRetentionMs = Number(values['sagas-retention-ms']);
  if (!Number.isInteger(batchSize) || batchSize < 1)
    return usageError('--batch-size must be a positive integer');
  for (const [name, value] of [
    ['--pause-ms', pauseMs],
    ['--outbox-retention-ms', outboxRetentionMs],
    ['--webhook-messages-retention-ms', messagesRetentionMs],
    ['--sagas-retention-ms', sagasRetentionMs],
  ] as const) {
    if (!Number.isFinite(value) || value < 0) return usageError(`${name} must be a number ≥ 0`);
  }

  const db = await openDatabase();
  try {
    await checkMigrated(db, values.schema);
    const settings = {
      schema: values.schema,
      batchSize,
      pauseMs,
      outboxRetentionMs,
      messagesRetentionMs,
      sagasRetentionMs,
    };
    const width = Math.max(...selected.map((t) => t.length)) + 1;
    let failed = false;
    const started = performance.now();
    for (const table of selected) {
      try {
        console.log(`${`${table}:`.padEnd(width)} ${await sweepTable(db, table, settings)}`);
      } catch (error) {
        // One table's failure (say, a schema migrated before it existed) leaves the others swept.
        failed = true;
        console.error(`${`${table}:`.padEnd(width)} failed: ${(error as Error).message}`);
      }
    }
    const seconds = (performance.now() - started) / 1000;
    console.log(`swept ${selected.length} tables in ${seconds.toFixed(2)} s`);
    return failed ? 1 : 0;
  } finally {
    await db.close();
  }
}

function usageError(message: string): number {
  return commandUsageError('sweep', message);
}

/** The tables `--only` names, in the sweep's order, or an error message. */
function parseOnly(value: string): Table[] | string {
  const names = value
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);
  const unknown = names.filter((name) => !(name in tables));
  if (unknown.length > 0) return `--only: unknown table ${unknown.join(', ')}`;
  if (names.length === 0) return '--only needs at least one table';
  return tableNames.filter((name) => names.includes(name));
}

/** Sweeps one table; returns what it did, for the table's line. */
async function sweepTable(db: CliDatabase, table: Table, s: SweepSettings): Promise<string> {
  const { sql } = db;
  const { schema } = s;
  // Every table's sweep takes the same options (the pause applies between its batches) and
  // answers with the same { deleted, cleared }.
  const options: SweepOptions = { batchSize: s.batchSize, pauseMs: s.pauseMs };
  const deleted = (result: SweepResult) => `deleted ${result.deleted} rows`;
  switch (table) {
    case 'requests': {
      const result = await createIdem({ sql, schema }).sweep(options);
      return `cleared ${result.cleared} expired results, deleted ${result.deleted} rows`;
    }
    case 'inbox':
      return deleted(await createInbox({ sql, schema }).sweep(options));
    case 'outbox': {
      const result = await createOutbox({ sql, schema }).sweep({
        ...options,
        olderThanMs: s.outboxRetentionMs,
      });
      return `deleted ${result.deleted} published rows`;
    }
    case 'webhook-receipts':
      return deleted(await sweepReceipts(sql, { ...options, schema }));
    case 'tasks':
      return deleted(await createClaims({ sql, schema }).sweep(options));
    case 'webhook-messages':
      return deleted(
        await createWebhookSender({ sql, schema }).sweep({ ...options, olderThanMs: s.messagesRetentionMs }),
      );
    case 'sagas':
      // The saga engine's sweep takes its retention from the engine; here it is chosen per run
      // (0: every finished saga), so the sweep runs without an engine.
      return deleted(
        await sweepSagas(sql, systemClock, renderSagaStatements(schema), s.sagasRetentionMs, options),
      );
  }
}
