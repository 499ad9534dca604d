import { createOutbox } from '../../outbox/outbox.js';
import { integerOption, parseSubcommand, usageError } from '../args.js';
import { checkMigrated, openDatabase } from '../database.js';

const usage = `usage:
  idem outbox redrive (--id ID | --topic T [--key K] | --all) [--schema idem]
      make dead events due again (attempts reset) and release the events parked behind them
  idem outbox stats [--topic T] [--schema idem]
      counts: pending, due, retrying, parked, dead, published
  idem outbox dead [--topic T] [--limit 20] [--schema idem]
      list dead events with their last error
  idem outbox cleanup [--retention-ms 86400000] [--cdc] [--schema idem]
      delete published rows older than the retention (--cdc: any row, for Debezium setups)`;

/** `idem outbox <redrive|stats|dead|cleanup>`: operator tools for the outbox. */
export async function run(argv: string[]): Promise<number> {
  const args = parseSubcommand('outbox', usage, argv, ['redrive', 'stats', 'dead', 'cleanup'], {
    schema: { type: 'string', default: 'idem' },
    id: { type: 'string' },
    topic: { type: 'string' },
    key: { type: 'string' },
    all: { type: 'boolean', default: false },
    limit: { type: 'string', default: '20' },
    'retention-ms': { type: 'string', default: '86400000' },
    cdc: { type: 'boolean', default: false },
  });
  if (args.exitCode !== undefined) return args.exitCode;
  const { values, subcommand: command } = args;
  if (command === 'redrive' && !values.id && !values.topic && !values.all) {
    // Redriving everything is a deliberate act: say so with --all.
    return usageError('outbox', 'redrive needs --id, --topic or --all');
  }
  const limit = integerOption('limit', values.limit, 1);
  if (typeof limit === 'string') return usageError('outbox', limit);
  const retentionMs = integerOption('retention-ms', values['retention-ms']);
  if (typeof retentionMs === 'string') return usageError('outbox', retentionMs);
  const db = await openDatabase();
  try {
    await checkMigrated(db, values.schema);
    const outbox = createOutbox({ sql: db.sql, schema: values.schema });
    switch (command) {
      case 'redrive': {
        const result = await outbox.redrive({ id: values.id, topic: values.topic, key: values.key });
        console.log(
          `revived ${result.revived} dead events, released ${result.released} events parked behind them`,
        );
        return 0;
      }
      case 'stats': {
        console.log(JSON.stringify(await outbox.stats({ topic: values.topic }), null, 2));
        return 0;
      }
      case 'dead': {
        const dead = await outbox.listDead({ topic: values.topic, limit });
        for (const e of dead) {
          console.log(
            `${e.id}  ${e.topic}  key=${e.key}  type=${e.type}  attempts=${e.attempts}  dead=${e.deadAt === null ? '-' : new Date(e.deadAt).toISOString()}\n    ${e.lastError}`,
          );
        }
        console.log(`${dead.length} dead event(s)`);
        return 0;
      }
      default: {
        const { deleted } = await outbox.sweep({ olderThanMs: retentionMs, capturedByCdc: values.cdc });
        console.log(`deleted ${deleted} rows`);
        return 0;
      }
    }
  } finally {
    await db.close();
  }
}
