import { migrate } from '../../migrate/migrate.js';
import { parseCommand } from '../args.js';
import { openDatabase } from '../database.js';

const usage = `usage: idem migrate [--schema idem]

Applies idem's pending migrations to DATABASE_URL, under an advisory lock: safe to run from
several processes at once. Prints what it applied.

  --schema NAME   schema of idem's tables (default idem)`;

/** `idem migrate [--schema idem]`: applies pending migrations; safe to run from several processes. */
export async function run(argv: string[]): Promise<number> {
  const args = parseCommand('migrate', usage, argv, { schema: { type: 'string', default: 'idem' } });
  if (args.exitCode !== undefined) return args.exitCode;
  const { schema } = args.values;
  const db = await openDatabase({ longStatements: true });
  try {
    const result = await migrate(db.sql, { schema });
    console.log(
      result.applied.length
        ? `applied ${result.applied.join(', ')} to schema ${schema}`
        : `schema ${schema} is up to date (${result.alreadyApplied} migrations)`,
    );
    return 0;
  } finally {
    await db.close();
  }
}
