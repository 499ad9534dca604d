/** The demo's settings, from the environment. Every one has a default that works on a fresh machine. */
export interface DemoConfig {
  /** `PORT`, default 3000. */
  port: number;
  /** `HOST`, default 127.0.0.1 (loopback: the console's token is not needed there). */
  host: string;
  /** `PROVIDER_PORT`, default 3001: where the fake card provider listens when this process runs it. */
  providerPort: number;
  /** `PROVIDER_URL`: use a provider running elsewhere instead of starting one. */
  providerUrl: string | undefined;
  /** `PROVIDER_WEBHOOK_SECRET`: the Standard Webhooks secret shared with the provider. */
  webhookSecret: string;
  /** `DATABASE_URL`: unset starts an embedded PostgreSQL under .idem/postgres. */
  databaseUrl: string | undefined;
  /** `AMQP_URL` switches the event transport to RabbitMQ. */
  amqpUrl: string | undefined;
  /** `NATS_URL` switches the event transport to NATS JetStream (when AMQP_URL is unset). */
  natsUrl: string | undefined;
  /** `IDEM_SCHEMA`, default `idem`; the demo's own tables live in `<schema>_demo`. */
  schema: string;
  /** `CONSOLE_TOKEN`: required by the console when bound beyond loopback. */
  consoleToken: string | undefined;
  /** `LEASE_MS`, default 5000: how soon a crashed payment is resumed by the client's retry. */
  leaseMs: number;
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
    amqpUrl: env.AMQP_URL || undefined,
    natsUrl: env.NATS_URL || undefined,
    schema: env.IDEM_SCHEMA || 'idem',
    consoleToken: env.CONSOLE_TOKEN || undefined,
    leaseMs: Number(env.LEASE_MS ?? 5000),
    poolSize: Number(env.DATABASE_POOL_SIZE ?? 20),
    providerLatencyMs: Number(env.PROVIDER_LATENCY_MS ?? 0),
  };
}
