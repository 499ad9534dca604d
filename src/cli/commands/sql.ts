import { parseArgs } from 'node:util';
import { migrationScript } from '../../migrate/migrate.js';

/** `idem sql [--schema idem]`: prints every migration as one plain SQL script. */
export async function run(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { schema: { type: 'string', default: 'idem' } } });
  process.stdout.write(migrationScript(values.schema));
  return 0;
}
