import { citusScript } from '../../migrate/citus.js';
import { migrationScript } from '../../migrate/migrate.js';
import { parseCommand, usageError } from '../args.js';

const usage = `usage: idem sql [--schema idem] [--citus]

Prints every idem migration as one plain SQL script, for teams that apply migrations with their
own tool. The script records the versions it applies in <schema>.migrations, as idem migrate does.

  --schema NAME   schema of idem's tables (default idem)
  --citus         append the Citus distribution of the tables on tenant_id (create_distributed_table,
                  colocated), to run once on the coordinator after the migrations`;

/** `idem sql [--schema idem] [--citus]`: prints every migration as one plain SQL script. */
export async function run(argv: string[]): Promise<number> {
  const args = parseCommand('sql', usage, argv, {
    schema: { type: 'string', default: 'idem' },
    citus: { type: 'boolean', default: false },
  });
  if (args.exitCode !== undefined) return args.exitCode;
  let script: string;
  try {
    script =
      migrationScript(args.values.schema) + (args.values.citus ? `\n${citusScript(args.values.schema)}` : '');
  } catch (error) {
    return usageError('sql', (error as Error).message);
  }
  process.stdout.write(script);
  return 0;
}
