import { migrationScript } from '../../migrate/migrate.js';
import { parseCommand } from '../args.js';

const usage = `usage: idem sql [--schema idem]

Prints every idem migration as one plain SQL script, for teams that apply migrations with their
own tool. The script records the versions it applies in <schema>.migrations, as idem migrate does.

  --schema NAME   schema of idem's tables (default idem)`;

/** `idem sql [--schema idem]`: prints every migration as one plain SQL script. */
export async function run(argv: string[]): Promise<number> {
  const args = parseCommand('sql', usage, argv, { schema: { type: 'string', default: 'idem' } });
  if (args.exitCode !== undefined) return args.exitCode;
  process.stdout.write(migrationScript(args.values.schema));
  return 0;
}
