/**
 * The demo's command line, for `npm start` (main.ts) and for `idem demo` run from this repository:
 * the payments demo on DATABASE_URL or an embedded PostgreSQL. Settings come from the environment;
 * see config.ts and docs/guide/demo.md.
 */
import { integerOption, parseCommand, usageError } from '../src/cli/args.js';
import { checkDatabaseUrl } from '../src/cli/database.js';
import { readConfig } from './config.js';
import { demoConsole } from './console.js';
import { startDemo } from './server.js';

const usage = `usage: idem demo [--port 3000] [--host 127.0.0.1]

Runs the payments demo: POST /v1/payments with an Idempotency-Key, the fake card provider, the
outbox, the ledger's inbox, provider webhooks, /metrics and the operator console (/console).
Ctrl-C stops it, its workers and its embedded PostgreSQL.

  --port N        the demo's port (default PORT, else 3000)
  --host ADDRESS  address to bind (default HOST, else 127.0.0.1)

Environment: DATABASE_URL (default: an embedded PostgreSQL under .idem/postgres), PORT, HOST,
PROVIDER_PORT (3001), PROVIDER_URL, PROVIDER_WEBHOOK_SECRET, AMQP_URL or NATS_URL (the event
transport; default in-database), IDEM_SCHEMA (idem), LEASE_MS (5000), CONSOLE_TOKEN.`;

/** Stops waiting for a stuck shutdown after this long, and says so. */
const shutdownLimitMs = 15_000;

export async function run(argv: string[]): Promise<number> {
  const args = parseCommand('demo', usage, argv, { port: { type: 'string' }, host: { type: 'string' } });
  if (args.exitCode !== undefined) return args.exitCode;
  const config = readConfig();
  if (args.values.port !== undefined) {
    const port = integerOption('port', args.values.port, 0, 65535);
    if (typeof port === 'string') return usageError('demo', port);
    config.port = port;
  }
  if (args.values.host !== undefined) config.host = args.values.host;
  if (config.databaseUrl) checkDatabaseUrl(config.databaseUrl);

  // Ctrl-C during the start (an embedded PostgreSQL initialising, say) stops as cleanly as after.
  let stopRequested = false;
  let requestStop: () => void = () => {
    stopRequested = true;
  };
  const onSignal = () => requestStop();
  // Kept for the whole shutdown: a second Ctrl-C (or the SIGTERM npm sends after it) must not
  // kill the process halfway, leaving the embedded server without its stop.
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const demo = await startDemo({ ...config, quiet: true, plugins: [demoConsole()] });
    console.log(`idem demo listening on ${demo.url}  (transport: ${demo.transport}, provider: ${demo.providerUrl})
Try:
  curl -i -X POST ${demo.url}/v1/payments \\
    -H 'Authorization: Bearer sk_test_acme' -H 'Idempotency-Key: order-1001' \\
    -H 'Content-Type: application/json' -d '{"amount":1250,"currency":"eur","customer":"alice"}'
  (send it again: the same status and body, with Idempotent-Replayed: true)
  curl '${demo.url}/v1/ledger?customer=alice' -H 'Authorization: Bearer sk_test_acme'
  open ${demo.url}/console
Ctrl-C stops it.`);
    if (!stopRequested) await new Promise<void>((resolve) => (requestStop = resolve));
    console.log('stopping…');
    const limit = setTimeout(() => {
      console.error(`idem demo: still stopping after ${shutdownLimitMs / 1000} s; exiting`);
      process.exit(1);
    }, shutdownLimitMs);
    limit.unref();
    await demo.close();
    clearTimeout(limit);
    return 0;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
