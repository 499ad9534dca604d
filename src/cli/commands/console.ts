/**
 * `idem console [--port 4000] [--host 127.0.0.1] [--schema idem]`: the operator console for the
 * idem tables in DATABASE_URL. Beyond loopback it needs CONSOLE_TOKEN, and refuses to start without.
 */
import Fastify from 'fastify';
import { consolePlugin } from '../../console/plugin.js';
import { checkExposure, isLoopback } from '../../console/access.js';
import { parseCommand, usageError } from '../args.js';
import { checkMigrated, openDatabase } from '../database.js';

const usage = `usage: idem console [--port 4000] [--host 127.0.0.1] [--schema idem]

Serves the operator console for the idem tables in DATABASE_URL at http://<host>:<port>/console.
Beyond loopback every route needs CONSOLE_TOKEN (the command refuses to start without it).

  --port N        port to listen on (default 4000; 0 picks a free one)
  --host ADDRESS  address to bind (default 127.0.0.1)
  --schema NAME   schema of idem's tables (default idem)`;

export async function run(argv: string[], signal?: AbortSignal): Promise<number> {
  const args = parseCommand('console', usage, argv, {
    port: { type: 'string', default: '4000' },
    host: { type: 'string', default: '127.0.0.1' },
    schema: { type: 'string', default: 'idem' },
  });
  if (args.exitCode !== undefined) return args.exitCode;
  const { values } = args;
  const port = Number(values.port);
  if (!/^\d+$/.test(values.port) || port > 65535) return usageError('console', '--port must be 0–65535');
  const token = process.env.CONSOLE_TOKEN || undefined;
  // Checked before anything opens: no database connection, no socket, for an unsafe setup.
  try {
    checkExposure(values.host, token);
  } catch (error) {
    console.error(`idem console: ${(error as Error).message}`);
    return 2;
  }
  const db = await openDatabase({ poolSize: 5 });
  const app = Fastify({ logger: false });
  try {
    // Before listening: against a database without idem's tables every page would be an error.
    await checkMigrated(db, values.schema);
    // db.sql honours IDEM_PREPARE (a pooler that keeps no prepared statements).
    await app.register(consolePlugin, { sql: db.sql, schema: values.schema, host: values.host, token });
    await app.listen({ port, host: values.host });
    const address = app.server.address();
    const bound = typeof address === 'object' && address ? address.port : port;
    const shown = values.host.includes(':') ? `[${values.host}]` : values.host;
    console.log(`idem console on http://${shown}:${bound}/console  (schema ${values.schema})`);
    if (token !== undefined) {
      console.log(
        isLoopback(values.host)
          ? 'CONSOLE_TOKEN is set: open /console?token=<CONSOLE_TOKEN> once (it sets a cookie).'
          : 'Bound beyond loopback: every route needs CONSOLE_TOKEN (Bearer header, or ?token= once).',
      );
    }
    console.log('Ctrl-C stops it.');
    await new Promise<void>((resolve) => {
      const stop = () => {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
        resolve();
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      signal?.addEventListener('abort', stop, { once: true });
    });
    return 0;
  } finally {
    await app.close();
    await db.close();
  }
}
