/**
 * `npm start`: the payments demo (command.ts), with the `idem` command's error reporting: a
 * failure is one line, never a stack trace, and exit code 1.
 */
import { describeError } from '../src/cli/errors.js';
import { run } from './command.js';

try {
  process.exitCode = await run(process.argv.slice(2));
} catch (error) {
  console.error(`idem: ${describeError(error, 'demo')}`);
  process.exitCode = 1;
}
