/** The demo's settings, from the environment. Every one has a default that works on a fresh machine. */
import { isLoopback } from '../src/console/access.js';
import { booleanSetting } from '../src/cli/settings.js';
import { InvalidArgumentError } from '../src/core/errors.js';

export interface DemoConfig {
  /** `PORT`, default 3000. */
  port: number;
  /** `HOST`, default 127.0.0.1 (loopback: the console's token is not needed there). */
  host: string;
  /** `PROVIDER_PORT`, default 3001: where the fake card provider listens when this process runs it. */
  providerPort: number;
  /** `PROVIDER_URL`: use a provider running elsewhere instead of starting one. */
  providerUrl: string | undefined;
  /**
   * `PROVIDER_WEBHOOK_SECRET`: the Standard Webhooks secret shared with the provider. Default: the
   * demo secret printed in docs/guide/demo.md, accepted on a loopback `HOST` only (see `checkWebhookSecret`).
   */
  webhookSecret: string;
  /** `DATABASE_URL`: unset starts an embedded PostgreSQL under .idem/postgres. May be a pooler's URL. */
  databaseUrl: string | undefined;
  /**
   * `DATABASE_DIRECT_URL`: a direct connection to PostgreSQL (not through a transaction-mode
   * pooler) for the outbox dispatcher's LISTEN. Default: `DATABASE_URL`. Behind PgBouncer in
   * transaction mode LISTEN receives nothing; see docs/operations/deployment.md.
   */
  directUrl: string | undefined;
  /**
   * `IDEM_PREPARE` (true/false), default true: idem's statements as named prepared statements.
   * Set false when `DATABASE_URL` is a pooler that does not keep them (PgBouncer in transaction
   * mode before 1.21); see docs/operations/deployment.md.
   */
  prepare: boolean;
  /**
   * `IDEM_PIPELINE` (true/false), default true: the `pg` pool in node-postgres's pipeline mode,
   * so a payment's BEGIN goes out with its first statement and idem's record with COMMIT (two round
   * trips of four; docs/operations/deployment.md, "Pipelining").
   */
  pipeline: boolean;
  /** `AMQP_URL` switches the event transport to RabbitMQ. */
  amqpUrl: string | undefined;
  /** `NATS_URL` switches the event transport to NATS JetStream (when AMQP_URL is unset). */
  natsUrl: string | undefined;
  /**
   * `BROKER_WAIT_MS`, default 60000: how long a start waits for a RabbitMQ or NATS that does not
   * answer yet (still starting, or restarting), with one line per attempt, before it gives up.
   */
  brokerWaitMs: number;
  /** `IDEM_SCHEMA`, default `idem`; the demo's own tables live in `<schema>_demo`. */
  schema: string;
  /** `CONSOLE_TOKEN`: required by the console when bound beyond loopback. */
  consoleToken: string | undefined;
  /**
   * `LEASE_MS`, default 5000: how soon a crashed payment is resumed, by the client's retry or by
   * the completer.
   */
  leaseMs: number;
  /** `COMPLETER_POLL_MS`, default 1000: how often the completer looks for abandoned payments. */
  completerPollMs: number;
  /**
   * `OUTBOX_POLL_MS`, default 1000: how often the dispatcher polls when no notification woke it
   * (LISTEN wakes it at each commit; the poll only catches what a lost notification missed).
   */
  outboxPollMs: number;
  /** `DATABASE_POOL_SIZE`, default 20: connections in the demo's `pg` pool. */
  poolSize: number;
  /**
   * `PROVIDER_LATENCY_MS`, default 0: how long the in-process fake provider takes per new charge
   * (a slow provider holds no database connection: the charge is a call between transactions).
   */
  providerLatencyMs: number;
}

/**
 * The documented demo secret (base64 of "idem-demo-provider-webhook-secret"). It signs the fake
 * provider's webhooks on a developer machine; never use it elsewhere.
 */
export const demoWebhookSecret = 'whsec_aWRlbS1kZW1vLXByb3ZpZGVyLXdlYmhvb2stc2VjcmV0';

export function readConfig(env: NodeJS.ProcessEnv = process.env): DemoConfig {
  return {
    port: Number(env.PORT ?? 3000),
    host: env.HOST ?? '127.0.0.1',
    providerPort: Number(env.PROVIDER_PORT ?? 3001),
    providerUrl: env.PROVIDER_URL || undefined,
    webhookSecret: env.PROVIDER_WEBHOOK_SECRET || demoWebhookSecret,
    databaseUrl: env.DATABASE_URL || undefined,
    directUrl: env.DATABASE_DIRECT_URL || undefined,
    prepare: booleanSetting('IDEM_PREPARE', env.IDEM_PREPARE, true),
    pipeline: booleanSetting('IDEM_PIPELINE', env.IDEM_PIPELINE, true),
    amqpUrl: env.AMQP_URL || undefined,
    natsUrl: env.NATS_URL || undefined,
    brokerWaitMs: Number(env.BROKER_WAIT_MS ?? 60_000),
    schema: env.IDEM_SCHEMA || 'idem',
    consoleToken: env.CONSOLE_TOKEN || undefined,
    leaseMs: Number(env.LEASE_MS ?? 5000),
    completerPollMs: Number(env.COMPLETER_POLL_MS ?? 1000),
    outboxPollMs: Number(env.OUTBOX_POLL_MS ?? 1000),
    poolSize: Number(env.DATABASE_POOL_SIZE ?? 20),
    providerLatencyMs: Number(env.PROVIDER_LATENCY_MS ?? 0),
  };
}

/**
 * Refuses to start on a non-loopback `HOST` with the documented webhook secret: anyone who read the
 * documentation could then sign refunds the demo would apply. On loopback it is kept (only this machine
 * can reach the receiver), and the demo says which secret it uses.
 */
export function checkWebhookSecret(config: Pick<DemoConfig, 'host' | 'webhookSecret'>): void {
  if (config.webhookSecret === demoWebhookSecret && !isLoopback(config.host)) {
    throw new InvalidArgumentError(
      `HOST=${config.host} is not a loopback address and PROVIDER_WEBHOOK_SECRET is unset: the demo ` +
        `will not accept webhooks signed with the secret printed in the documentation from other machines. ` +
        `Set PROVIDER_WEBHOOK_SECRET (e.g. whsec_ followed by 32 random bytes in base64), or bind HOST=127.0.0.1.`,
    );
  }
}
