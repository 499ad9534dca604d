import { parseArgs } from 'node:util';
import { createIdem } from '../../operations/idem.js';
import { openDatabase } from '../database.js';

/** `idem inspect <tenant> <operation> <key> [--schema idem]`: prints one key's row as JSON. */
export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { schema: { type: 'string', default: 'idem' } },
  });
  const [tenant, operation, key] = positionals;
  if (!tenant || !operation || !key) {
    console.error('usage: idem inspect <tenant> <operation> <key> [--schema idem]');
    return 2;
  }
  const db = await openDatabase();
  try {
    const row = await createIdem({ sql: db.sql, schema: values.schema }).inspect({ tenant, operation, key });
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
