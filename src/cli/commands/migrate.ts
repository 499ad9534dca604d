import { parseArgs } from 'node:util';
import { migrate } from '../../migrate/migrate.js';
import { openDatabase } from '../database.js';

/** `idem migrate [--schema idem]`: applies pending migrations; safe to run from several processes. */
export async function run(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { schema: { type: 'string', default: 'idem' } } });
  const db = await openDatabase();
  try {
    const result = await migrate(db.sql, { schema: values.schema });
    console.log(
      result.applied.length
        ? `applied ${result.applied.join(', ')} to schema ${values.schema}`
        : `schema ${values.schema} is up to date (${result.alreadyApplied} migrations)`,
    );
    return 0;
  } finally {
    await db.close();
  }
}
