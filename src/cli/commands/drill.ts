import { writeFile } from 'node:fs/promises';
import { isIdemError } from '../../core/errors.js';
import { drillUsage, parseDrillArgs } from '../../drill/cli-args.js';
import { streamProgress, silentProgress } from '../../drill/progress.js';
import { renderJson } from '../../drill/report-json.js';
import { renderTable } from '../../drill/report-table.js';
import { runDrills } from '../../drill/runner.js';
import { argumentProblem, usageError } from '../args.js';

/**
 * `idem drill --url URL [--body JSON] [--header 'Name: value']… [--json out.json]`: runs the
 * conformance drills; the table goes to stdout, progress to stderr. Exit 0 when every drill that
 * ran passed, 1 when one failed (or none ran), 2 for unusable arguments.
 */
export async function run(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(drillUsage);
    return 0;
  }
  let command;
  try {
    command = await parseDrillArgs(argv);
    if (command.help) {
      process.stdout.write(drillUsage);
      return 0;
    }
    const report = await runDrills(command.options, {
      progress: command.quiet ? silentProgress : streamProgress(process.stderr),
    });
    const json = renderJson(report);
    if (command.jsonPath === '-') {
      process.stdout.write(json);
    } else {
      process.stdout.write(renderTable(report, { color: process.stdout.isTTY && !process.env.NO_COLOR }));
      if (command.jsonPath) await writeFile(command.jsonPath, json);
    }
    return report.ok ? 0 : 1;
  } catch (error) {
    if (isIdemError(error) && error.code === 'IDEM_INVALID_ARGUMENT') {
      return usageError('drill', argumentProblem(error.message));
    }
    throw error;
  }
}
