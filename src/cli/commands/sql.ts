import { parseArgs } from 'node:util';
import { citusScript } from '../../migrate/citus.js';
import { migrationScript } from '../../migrate/migrate.js';

const usage = `usage: idem sql [--schema idem] [--citus]

Prints every migration as one plain SQL script. --citus appends the Citus distribution of the
tables on tenant_id (create_distributed_table, colocated), to run once after the migrations.`;

/** `idem sql [--schema idem] [--citus]`: prints every migration as one plain SQL script. */
export async function run(argv: string[]): Promise<number> {
  let values: { schema: string; citus?: boolean; help?: boolean };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        schema: { type: 'string', default: 'idem' },
        citus: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h' },
      },
    }) as { values: typeof values });
  } catch (error) {
    console.error(`idem sql: ${(error as Error).message}\n${usage}`);
    return 2;
  }
  if (values.help) {
    console.log(usage);
    return 0;
  }
  let script: string;
  try {
    script = migrationScript(values.schema) + (values.citus ? `\n${citusScript(values.schema)}` : '');
  } catch (error) {
    console.error(`idem sql: ${(error as Error).message}`);
    return 2;
  }
  process.stdout.write(script);
  return 0;
}
