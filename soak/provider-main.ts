/**
 * The fake card provider (demo/provider.ts) as its own process, so the soak can kill -9 every
 * app instance while the provider, which stands for someone else's system, keeps its charges.
 *
 * Environment:
 * - `PROVIDER_PORT`: port to listen on; default 0 (a free one).
 * - `WEBHOOK_TARGETS`: comma-separated base URLs of the app instances. Refund webhooks go to
 *   `/webhooks/provider` behind a load balancer in this process (load-balancer.ts), as a provider
 *   sees one merchant URL.
 * - `PROVIDER_WEBHOOK_SECRET`: the Standard Webhooks secret; default the demo's.
 * - `PROVIDER_LATENCY_MS`: latency per new charge; default 0. A little latency makes kills during
 *   the charge step likely.
 *
 * Prints `provider listening on <url>` once it listens; stops on SIGTERM or SIGINT.
 */
import { demoWebhookSecret } from '../demo/config.js';
import { startProvider } from '../demo/provider.js';
import { startLoadBalancer } from './load-balancer.js';

const targets = (process.env.WEBHOOK_TARGETS ?? '').split(',').filter((url) => url !== '');
const balancer = await startLoadBalancer(targets);

const provider = await startProvider({
  port: Number(process.env.PROVIDER_PORT ?? 0),
  webhookSecret: process.env.PROVIDER_WEBHOOK_SECRET || demoWebhookSecret,
  latencyMs: Number(process.env.PROVIDER_LATENCY_MS ?? 0),
  webhookUrl: `${balancer.url}/webhooks/provider`,
});
console.log(`provider listening on ${provider.url}`);

const stop = () => {
  balancer.server.close();
  provider.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
