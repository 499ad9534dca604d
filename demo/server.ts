/**
 * The payments demo: every part of idem in one small service.
 * - `POST /v1/payments`: Idempotency-Key contract (idem/fastify, steps mode), a charge at the fake
 *   provider with a derived key (idem/client), the event in the outbox and a receipt task (claims).
 * - An outbox dispatcher delivers events to the ledger's inbox (in-database, RabbitMQ or NATS).
 * - `POST /webhooks/provider`: Standard Webhooks receiver; refunds processed later, order-aware.
 * - `GET /metrics` (Prometheus) and `/console` (operator console, when built).
 */
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply } from 'fastify';
import pg from 'pg';
import { fromPg, pgConnectionDefaults } from '../src/adapters/pg.js';
import { createEvents } from '../src/core/event-channel.js';
import { createClaims } from '../src/claims/claims.js';
import { createResilientClient } from '../src/client/client.js';
import { isRetryable } from '../src/core/retryable.js';
import { startEmbeddedPostgres } from '../src/embedded/embedded-postgres.js';
import { idempotency } from '../src/http/fastify.js';
import { migrate } from '../src/migrate/migrate.js';
import { createIdemMetrics } from '../src/observability/prometheus.js';
import { createIdem } from '../src/operations/idem.js';
import { createOutboxDispatcher } from '../src/outbox/dispatcher.js';
import { createOutbox } from '../src/outbox/outbox.js';
import { createWebhookProcessor } from '../src/webhooks/processor.js';
import { createWebhookReceiver } from '../src/webhooks/receiver.js';
import { createStandardWebhooksVerifier } from '../src/webhooks/verify/standard-webhooks.js';
import { authorize } from './auth.js';
import { checkWebhookSecret, demoWebhookSecret, readConfig, type DemoConfig } from './config.js';
import { definePayments, registerPayments } from './payments.js';
import { createCompleter } from '../src/operations/completer.js';
import { startProvider, type FakeCardProvider } from './provider.js';
import { createInbox } from '../src/inbox/inbox.js';
import { createReceiptWorker } from './receipts.js';
import { refundHandlers } from './refunds.js';
import { demoSchemaSql } from './schema.js';
import { createTransport } from './transport.js';
import { invalidRequest, strictAjv, validationParams } from './validation.js';
import { webhooks as fastifyWebhooks } from '../src/webhooks/fastify.js';

export interface DemoHandle {
  url: string;
  providerUrl: string;
  databaseUrl: string;
  transport: string;
  app: FastifyInstance;
  pool: pg.Pool;
  provider: FakeCardProvider | undefined;
  close(): Promise<void>;
}

export interface DemoOverrides extends Partial<DemoConfig> {
  /** Start the fake provider in this process (default: when `providerUrl` is unset). */
  startProvider?: boolean;
  /** Quiet request logging. Default true. */
  quiet?: boolean;
  /** Extra routes, e.g. the console. */
  plugins?: ((
    app: FastifyInstance,
    context: { pool: pg.Pool; databaseUrl: string; schema: string; demoSchema: string; config: DemoConfig },
  ) => Promise<void>)[];
}

export async function startDemo(overrides: DemoOverrides = {}): Promise<DemoHandle> {
  const config: DemoConfig = { ...readConfig(), ...overrides };
  checkWebhookSecret(config);
  if (config.webhookSecret === demoWebhookSecret) {
    console.log('PROVIDER_WEBHOOK_SECRET is not set: webhooks use the documented secret (loopback only)');
  }
  const cleanups: (() => Promise<unknown>)[] = [];
  const close = async () => {
    for (const cleanup of cleanups.reverse())
      await cleanup().catch((e: unknown) => console.error('shutdown:', e));
  };
  try {
    let databaseUrl = config.databaseUrl;
    if (!databaseUrl) {
      console.log('DATABASE_URL is not set: starting an embedded PostgreSQL (data under .idem/postgres)');
      const embedded = await startEmbeddedPostgres();
      cleanups.push(() => embedded.stop());
      databaseUrl = embedded.url;
    }
    // Connect and checkout timeout, keepalive, client and server statement bounds, an
    // idle-in-transaction bound and a connection lifetime (see pgConnectionDefaults): without
    // them a failover left connections "connecting" for ever and the demo wedged until restarted.
    const pool = new pg.Pool({
      ...pgConnectionDefaults,
      connectionString: databaseUrl,
      max: config.poolSize,
      pipeline: config.pipeline,
      application_name: 'idem-demo',
    });
    pool.on('error', (error) => console.error(`database connection lost: ${error.message}`));
    cleanups.push(() => pool.end());
    const sql = fromPg(pool, { prepare: config.prepare });
    const schema = config.schema;
    const demoSchema = `${schema}_demo`;
    await migrate(sql, { schema });
    await pool.query(demoSchemaSql(demoSchema));

    // One event channel for every module: the metrics count from it (operations, the ledger's
    // duplicates, webhook refusals, completions); a failure a worker survives, which nobody else
    // listens to, is one line on stderr.
    const events = createEvents();
    const metrics = createIdemMetrics({ sql, schema, events });
    // What an operator wants in the demo's log: refusals and dead letters, one JSON line each
    // (names, codes and reasons only: never a header's value, a signature or a body).
    const logLine = (message: string, fields: object) =>
      console.warn(JSON.stringify({ level: 'warn', message, ...fields }));
    events.on('webhook:rejected', ({ message, ...fields }) =>
      logLine('webhook rejected', { ...fields, error: message }),
    );
    events.on('webhook:dead', (fields) => logLine('webhook receipt dead', fields));
    events.on('outbox:dead', ({ event, error }) =>
      logLine('outbox event dead', { id: event.id, topic: event.topic, error }),
    );
    const idem = createIdem({ sql, schema, events, leaseMs: config.leaseMs, waitMs: 2000 });
    const outbox = createOutbox({ sql, schema });
    const inbox = createInbox({ sql, schema, events });
    const claims = createClaims({ sql, schema, events, leaseMs: 10_000 });

    // Where this process reaches the demo; known once it listens (PORT=0, HOST=…).
    let localUrl = `http://127.0.0.1:${config.port}`;
    // The provider: in this process unless PROVIDER_URL points elsewhere.
    let provider: FakeCardProvider | undefined;
    let providerUrl = config.providerUrl;
    if (!providerUrl || overrides.startProvider) {
      provider = await startProvider({
        port: config.providerPort,
        webhookSecret: config.webhookSecret,
        latencyMs: config.providerLatencyMs,
        // Read when a webhook is sent: the app's address is known only once it listens.
        webhookUrl: () => `${localUrl}/webhooks/provider`,
      });
      cleanups.push(() => provider!.close());
      providerUrl = provider.url;
    }
    const providerClient = createResilientClient({ keyFormat: 'bare', maxAttempts: 4, timeoutMs: 5000 });

    const namespace = `idem-demo-${schema}`;
    const transport = await createTransport({
      inbox,
      demoSchema,
      amqpUrl: config.amqpUrl,
      natsUrl: config.natsUrl,
      namespace,
      brokerWait: { waitMs: config.brokerWaitMs },
    });
    await transport.start();
    cleanups.push(() => transport.close());
    const dispatcher = createOutboxDispatcher({
      sql,
      schema,
      publisher: transport.publisher,
      // LISTEN needs a direct connection: through a transaction-mode pooler it receives nothing.
      listen: config.directUrl ?? databaseUrl,
      pollIntervalMs: config.outboxPollMs,
      batchSize: 100,
      maxAttempts: 20,
      backoff: { baseMs: 200, maxMs: 10_000 },
      events,
    });
    await dispatcher.start();
    cleanups.push(() => dispatcher.stop());

    const receiver = createWebhookReceiver({
      sql,
      schema,
      sources: { provider: createStandardWebhooksVerifier({ secrets: [config.webhookSecret] }) },
      // The app's own 64 KiB, not the receiver's 1 MiB default: refund events are a few hundred bytes.
      maxBodyBytes: 64 * 1024,
      // Every refusal is an event (`webhook:rejected`), counted by reason by the metrics.
      events,
    });
    // A stored receipt wakes the processor at once, rather than at its next poll.
    events.on('webhook:received', () => processor.notify());
    const processor = createWebhookProcessor({
      sql,
      schema,
      handlers: refundHandlers(demoSchema, outbox),
      events,
      pollIntervalMs: 500,
      backoff: { baseMs: 500, maxMs: 10_000 },
    });
    await processor.start();
    cleanups.push(() => processor.stop());
    const receipts = createReceiptWorker(claims, demoSchema, events);
    await receipts.start();
    cleanups.push(() => receipts.stop());

    // Payments are a defined operation: the completer finishes one whose process died after the
    // provider charged, or whose client gave up, without waiting for a retry of its key.
    const createPayment = definePayments(idem, {
      demoSchema,
      outbox,
      claims,
      provider: providerClient,
      providerUrl,
    });
    const completer = createCompleter({
      idem,
      pollIntervalMs: config.completerPollMs,
      events,
    });
    await completer.start();
    cleanups.push(() => completer.stop());

    const app = Fastify({
      logger: overrides.quiet === false,
      bodyLimit: 64 * 1024,
      ajv: strictAjv,
      // Refusals of the router, before any route: problems like every other refusal.
      frameworkErrors: (error, _request, reply) => void routerRefusal(error, reply as FastifyReply),
    });
    app.decorate('pg', pool);
    cleanups.push(() => app.close());
    app.get('/metrics', async (_request, reply) =>
      reply.type(metrics.contentType).send(await metrics.render()),
    );
    // Liveness: the process answers. Readiness: the database answers, writable (not a standby or
    // a primary being demoted), within a second; a load balancer sends traffic elsewhere meanwhile.
    app.get('/healthz', async () => ({ ok: true, transport: transport.name }));
    app.get('/readyz', async (_request, reply) => {
      const ready = await databaseReadiness(pool);
      return reply.code(ready.ready ? 200 : 503).send({ ...ready, transport: transport.name });
    });
    await app.register(fastifyWebhooks({ routes: { '/webhooks/provider': 'provider' }, receiver: receiver }));
    for (const plugin of overrides.plugins ?? [])
      await plugin(app, { pool, databaseUrl, schema, demoSchema, config });

    await app.register(async (api) => {
      api.addHook('onRequest', async (request, reply) => {
        const auth = authorize(request.raw.rawHeaders);
        if (auth.kind === 'repeated') {
          return reply
            .code(400)
            .type('application/problem+json')
            .send(
              invalidRequest([
                {
                  name: 'Authorization',
                  in: 'header',
                  reason: `must be sent once (it came ${auth.count} times)`,
                },
              ]),
            );
        }
        if (auth.kind === 'missing') {
          return reply
            .code(401)
            .header('www-authenticate', 'Bearer')
            .type('application/problem+json')
            .send({ type: 'urn:idem-demo:unauthorized', title: 'Missing or invalid API key', status: 401 });
        }
        request.tenant = auth.tenant;
      });
      api.setErrorHandler((error: FastifyError, _request, reply) => {
        // Schema validation: a 400 that names the field, before any key was claimed.
        const invalid = validationParams(error);
        if (invalid) return reply.code(400).type('application/problem+json').send(invalidRequest(invalid));
        let status = error.statusCode && error.statusCode < 500 ? error.statusCode : 500;
        // A transient failure (a pooler error, a lost connection, the provider down): the payment's
        // recorded steps stay and its lease is released, so a retry with the same key resumes it.
        if (status === 500 && isRetryable(error)) status = 503;
        if (status >= 500) console.error('demo:', error);
        if (status === 503) reply.header('retry-after', '1');
        const [type, title] =
          status === 400
            ? ['invalid-request', 'Invalid request']
            : status === 503
              ? ['unavailable', 'Try again with the same key']
              : ['error', 'Request failed'];
        return reply
          .code(status)
          .type('application/problem+json')
          .send({
            type: `urn:idem-demo:${type}`,
            title,
            status,
            ...(status === 400 ? { detail: error.message } : {}),
          });
      });
      await api.register(idempotency, { idem, events, tenant: (request) => request.tenant, waitMs: 2000 });
      registerPayments(api, {
        demoSchema,
        outbox,
        claims,
        provider: providerClient,
        providerUrl,
        createPayment,
      });
    });

    await app.listen({ port: config.port, host: config.host });
    localUrl = reachableUrl(app.server.address() as AddressInfo);
    return {
      url: localUrl,
      providerUrl: providerUrl,
      databaseUrl,
      transport: transport.name,
      app,
      pool,
      provider,
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

/**
 * Whether the database can take a payment now: a `SELECT` answered within `withinMs` on a
 * writable session. Never throws.
 */
export async function databaseReadiness(
  pool: pg.Pool,
  withinMs = 1000,
): Promise<{ ready: boolean; database: string }> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${withinMs} ms`)), withinMs);
  });
  try {
    const { rows } = await Promise.race([
      pool.query<{ writable: boolean }>({
        text: `SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' AS writable`,
        query_timeout: withinMs,
      } as pg.QueryConfig),
      late,
    ]);
    return rows[0]?.writable
      ? { ready: true, database: 'ok' }
      : { ready: false, database: 'read-only (a standby, or a primary being demoted)' };
  } catch (error) {
    return { ready: false, database: (error as Error).message };
  } finally {
    clearTimeout(timer);
  }
}

/** The router's refusals: a path that is not valid percent-encoding, a path segment over 100 characters. */
function routerRefusal(error: FastifyError, reply: FastifyReply): FastifyReply {
  const problem = reply.code(400).type('application/problem+json');
  if (error.code === 'FST_ERR_MAX_PARAM_LENGTH') {
    return problem.code(414).send({
      ...invalidRequest([{ name: 'url', in: 'path', reason: 'has a segment over 100 characters' }]),
      status: 414,
    });
  }
  return problem.send(invalidRequest([{ name: 'url', in: 'path', reason: 'is not valid percent-encoding' }]));
}

/**
 * The URL a client on this machine reaches a server at: the address it is bound to, or loopback
 * when it is bound to every address (`0.0.0.0`, `::`). Never a fixed 127.0.0.1: with HOST=::1 or
 * HOST=192.168.1.5 nothing listens there.
 */
export function reachableUrl(address: AddressInfo): string {
  const host =
    address.address === '0.0.0.0' ? '127.0.0.1' : address.address === '::' ? '::1' : address.address;
  return `http://${host.includes(':') ? `[${host}]` : host}:${address.port}`;
}

/** A random schema name, so tests and soak runs never share tables. */
export function randomSchema(prefix = 'idem_demo'): string {
  return `${prefix}_${randomBytes(4).toString('hex')}`;
}
