/**
 * `idem demo` (and `npm start`): the payments demo on DATABASE_URL or an embedded PostgreSQL.
 * Settings come from the environment; see src/demo/config.ts and the README.
 */
import { demoConsole } from '../../console/index.js';
import { startDemo } from '../../demo/server.js';

export async function run(): Promise<number> {
  const demo = await startDemo({ quiet: true, plugins: [demoConsole()] });
  console.log(`idem demo listening on ${demo.url}  (transport: ${demo.transport}, provider: ${demo.providerUrl})
Try:
  curl -s -X POST ${demo.url}/v1/payments \\
    -H 'Authorization: Bearer sk_test_acme' -H 'Idempotency-Key: order-1001' \\
    -H 'Content-Type: application/json' -d '{"amount":1250,"currency":"eur","customer":"alice"}'
  (send it again: same body, Idempotent-Replayed: true)
  curl -s ${demo.url}/v1/ledger?customer=alice -H 'Authorization: Bearer sk_test_acme'
  open ${demo.url}/console
Ctrl-C stops it.`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  console.log('stopping…');
  await demo.close();
  return 0;
}
