import { createIdem } from '../../operations/idem.js';
import { parseCommand, usageError } from '../args.js';
import { checkMigrated, openDatabase } from '../database.js';

const usage = `usage: idem inspect <tenant> <operation> <key> [--schema idem]

Prints one key's record as JSON: state, fingerprint, lease, fence, recovery point, the stored
response's status and size. Exit code 1 when there is no such key.

  --schema NAME   schema of idem's tables (default idem)`;

/** `idem inspect <tenant> <operation> <key> [--schema idem]`: prints one key's row as JSON. */
export async function run(argv: string[]): Promise<number> {
  const args = parseCommand('inspect', usage, argv, { schema: { type: 'string', default: 'idem' } }, 3);
  if (args.exitCode !== undefined) return args.exitCode;
  const [tenant, operation, key] = args.positionals;
  if (!tenant || !operation || !key) {
    const missing = ['<tenant>', '<operation>', '<key>'].slice(args.positionals.length).join(' ');
    return usageError('inspect', `missing ${missing}`);
  }
  const { schema } = args.values;
  const db = await openDatabase();
  try {
    await checkMigrated(db, schema);
    const row = await createIdem({ sql: db.sql, schema }).get({ tenant, operation, key });
    if (!row) {
      console.log('no such key');
      return 1;
    }
    const { body, ...rest } = row;
    console.log(JSON.stringify({ ...rest, bodyBytes: body?.length ?? null }, null, 2));
    return 0;
  } finally {
    await db.close();
  }
}
