import { decideIntent, listIntents } from '../../operations/completer.js';
import { createIdem } from '../../operations/idem.js';
import { integerOption, parseSubcommand, usageError } from '../args.js';
import { checkMigrated, openDatabase } from '../database.js';

const usage = `usage:
  idem intents list [--operation OP] [--limit 20] [--schema idem]
      pending defined operations (idem.define), oldest first: attempts, last error, next attempt
  idem intents give-up --tenant T --operation OP --key K (--compensate | --fail | --withdraw) [--schema idem]
      an operator's decision for one that cannot complete, carried out by the application's
      completer on its next round: run its compensation, or end it failed (every retry of its
      key then gets the failure); --withdraw takes the decision back`;

/** `idem intents <list|give-up>`: what the completer is working on, and an operator's decisions. */
export async function run(argv: string[]): Promise<number> {
  const args = parseSubcommand('intents', usage, argv, ['list', 'give-up'], {
    schema: { type: 'string', default: 'idem' },
    tenant: { type: 'string' },
    operation: { type: 'string' },
    key: { type: 'string' },
    limit: { type: 'string', default: '20' },
    compensate: { type: 'boolean', default: false },
    fail: { type: 'boolean', default: false },
    withdraw: { type: 'boolean', default: false },
  });
  if (args.exitCode !== undefined) return args.exitCode;
  const { values, subcommand: command } = args;
  const limit = integerOption('limit', values.limit, 1);
  if (typeof limit === 'string') return usageError('intents', limit);
  const decisions = [values.compensate, values.fail, values.withdraw].filter(Boolean).length;
  if (command === 'give-up') {
    if (!values.tenant || !values.operation || !values.key) {
      return usageError('intents', 'give-up needs --tenant, --operation and --key');
    }
    if (decisions !== 1)
      return usageError('intents', 'give-up needs one of --compensate, --fail, --withdraw');
  }
  const db = await openDatabase();
  try {
    await checkMigrated(db, values.schema);
    const idem = createIdem({ sql: db.sql, schema: values.schema });
    if (command === 'list') {
      const intents = await listIntents(idem, {
        limit,
        ...(values.operation ? { operation: values.operation } : {}),
      });
      for (const i of intents) {
        console.log(
          `${i.scope.tenant}  ${i.scope.operation}  ${i.scope.key}  attempts=${i.attempts}  at=${i.recoveryPoint ?? '-'}  next=${i.nextAttemptAt.toISOString()}${i.giveUp ? `  give-up=${i.giveUp}` : ''}${i.lastError ? `\n    ${i.lastError}` : ''}`,
        );
      }
      console.log(`${intents.length} pending intent(s)`);
      return 0;
    }
    const action = values.compensate ? 'compensate' : values.fail ? 'fail' : null;
    const scope = { tenant: values.tenant!, operation: values.operation!, key: values.key! };
    if (!(await decideIntent(idem, scope, action))) {
      console.error(
        `idem intents: no pending intent for ${scope.tenant} / ${scope.operation} / ${scope.key}`,
      );
      return 1;
    }
    console.log(
      action === null
        ? 'decision withdrawn: the completer resumes it as before'
        : `recorded: the completer will ${action === 'compensate' ? 'run its compensation' : 'end it failed'} on its next round`,
    );
    return 0;
  } finally {
    await db.close();
  }
}
