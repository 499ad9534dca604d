/**
 * `npm run soak -- [options]`. Every option has a default that runs the short (CI) soak.
 */
import { parseArgs } from 'node:util';

export type TransportName = 'rabbitmq' | 'nats' | 'in-database';

export interface SoakOptions {
  /** `--duration <s>`: how long clients send new payments while the chaos runs. Default 60 s (the short, CI soak). */
  durationMs: number;
  /** `--instances <n>`: app instances (HTTP, dispatcher, consumer, webhook processor, claims worker each). Default 3. */
  instances: number;
  /** `--clients <n>`: concurrent client loops. Default 8. */
  clients: number;
  /** `--transport rabbitmq|nats|in-database`: how events travel to the ledger. Default in-database. */
  transport: TransportName;
  /** `--kill-every <s>`: mean seconds between two kill -9 of an app instance. Default 6 s. */
  killEveryMs: number;
  /** `--broker-every <s>`: mean seconds between two broker restarts (not for in-database). Default 30 s. */
  brokerEveryMs: number;
  /** `--refunds <0..1>`: share of succeeded payments that are refunded at the provider. Default 0.3. */
  refundShare: number;
  /**
   * `--refund-race`: send a payment's two partial refunds back to back, so their webhooks race.
   * Default off: the second waits until the first shows in the ledger. On, it checks that the
   * demo applies racing refunds in sequence (it once dropped the older one: docs/operations/reliability.md).
   */
  refundRace: boolean;
  /** `--declined <0..1>`: share of payments whose card is declined (a stored 402). Default 0.1. */
  declinedShare: number;
  /** `--lease <ms>`: LEASE_MS of the instances: how soon a retry may resume a killed payment. Default 3000. */
  leaseMs: number;
  /** `--provider-latency <ms>`: latency per charge at the provider, so kills land mid-charge. Default 40. */
  providerLatencyMs: number;
  /** `--request-timeout <ms>`: the client's AbortSignal timeout per attempt. Default 10000. */
  requestTimeoutMs: number;
  /** `--settle <s>`: longest wait for quiescence after the chaos stops. Default 120 s. */
  settleMs: number;
  /** `--intent-deadline <s>`: a client gives up on one payment after this long (then it counts as lost). Default 180 s. */
  intentDeadlineMs: number;
  /** `--keep`: keep the schema, the broker's queues and the logs. Default false (logs are always kept). */
  keep: boolean;
  /** `--seed <n>`: seed of the chaos and client choices. Default: random (printed). */
  seed: number;
}

const usage = `usage: npm run soak -- [--duration 60] [--instances 3] [--clients 8]
  [--transport rabbitmq|nats|in-database] [--kill-every 6] [--broker-every 30] [--refunds 0.3] [--refund-race]
  [--declined 0.1] [--lease 3000] [--provider-latency 40] [--request-timeout 10000] [--settle 120]
  [--intent-deadline 180] [--seed N] [--keep]
Environment: DATABASE_URL (default: an embedded PostgreSQL), AMQP_URL (rabbitmq; default
amqp://guest:guest@127.0.0.1:5672). NATS runs its own nats-server (/usr/sbin/nats-server, or NATS_SERVER_BIN).`;

export function parseOptions(argv: string[]): SoakOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      duration: { type: 'string' },
      instances: { type: 'string' },
      clients: { type: 'string' },
      transport: { type: 'string' },
      'kill-every': { type: 'string' },
      'broker-every': { type: 'string' },
      refunds: { type: 'string' },
      'refund-race': { type: 'boolean' },
      declined: { type: 'string' },
      lease: { type: 'string' },
      'provider-latency': { type: 'string' },
      'request-timeout': { type: 'string' },
      settle: { type: 'string' },
      'intent-deadline': { type: 'string' },
      seed: { type: 'string' },
      keep: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    console.log(usage);
    process.exit(0);
  }
  const num = (name: string, value: string | undefined, fallback: number, min: number, max: number) => {
    const n = value === undefined ? fallback : Number(value);
    if (!Number.isFinite(n) || n < min || n > max)
      throw new Error(`--${name} must be a number in [${min}, ${max}]\n${usage}`);
    return n;
  };
  const transport = (values.transport ?? 'in-database') as TransportName;
  if (!['rabbitmq', 'nats', 'in-database'].includes(transport)) {
    throw new Error(`--transport must be rabbitmq, nats or in-database\n${usage}`);
  }
  return {
    durationMs: num('duration', values.duration, 60, 1, 86_400) * 1000,
    instances: Math.round(num('instances', values.instances, 3, 1, 16)),
    clients: Math.round(num('clients', values.clients, 8, 1, 256)),
    transport,
    killEveryMs: num('kill-every', values['kill-every'], 6, 0.5, 3600) * 1000,
    brokerEveryMs: num('broker-every', values['broker-every'], 30, 5, 3600) * 1000,
    refundShare: num('refunds', values.refunds, 0.3, 0, 1),
    refundRace: values['refund-race'] ?? false,
    declinedShare: num('declined', values.declined, 0.1, 0, 1),
    leaseMs: num('lease', values.lease, 3000, 100, 600_000),
    providerLatencyMs: num('provider-latency', values['provider-latency'], 40, 0, 10_000),
    requestTimeoutMs: num('request-timeout', values['request-timeout'], 10_000, 100, 600_000),
    settleMs: num('settle', values.settle, 120, 1, 3600) * 1000,
    intentDeadlineMs: num('intent-deadline', values['intent-deadline'], 180, 1, 3600) * 1000,
    keep: values.keep ?? false,
    seed: Math.round(num('seed', values.seed, Math.floor(Math.random() * 2 ** 31), 0, 2 ** 31)),
  };
}
