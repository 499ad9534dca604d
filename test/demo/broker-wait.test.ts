/**
 * `npm start` while the broker is still starting: the demo waits for it (one line per attempt)
 * instead of exiting with ECONNREFUSED, and refusals that waiting cannot change fail at once.
 */
import { randomUUID } from 'node:crypto';
import { createConnection, createServer, type AddressInfo, type Server } from 'node:net';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { untilBrokerAnswers } from '../../demo/broker-wait.js';
import { randomSchema, type DemoHandle } from '../../demo/server.js';
import { dropDemoSchemas, startTestDemo } from '../support/demo.js';
import { until } from '../support/poll.js';
import { serviceUrl } from '../support/services.js';

const refused = () =>
  Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5672'), { code: 'ECONNREFUSED' });

/** Waits for broker `name` whose every connect throws `error`, silently: what it threw, and how often it tried. */
async function failingWith(name: string, error: Error, options: { waitMs?: number } = {}) {
  let calls = 0;
  const thrown = await untilBrokerAnswers(
    name,
    async () => {
      calls++;
      throw error;
    },
    { ...options, log: () => undefined, sleep: async () => undefined },
  ).catch((e: unknown) => e);
  return { error: thrown, calls };
}

describe('waiting for a broker at start', () => {
  it('retries while the broker refuses connections, then goes on', async () => {
    const lines: string[] = [];
    const waits: number[] = [];
    let calls = 0;
    const value = await untilBrokerAnswers(
      'RabbitMQ',
      async () => {
        if (++calls < 4) throw refused();
        return 'connected';
      },
      { log: (line) => lines.push(line), sleep: async (ms) => void waits.push(ms) },
    );
    expect(value).toBe('connected');
    expect(calls).toBe(4);
    expect(waits).toEqual([250, 500, 1000]);
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(/^waiting for RabbitMQ \(attempt 1: connect ECONNREFUSED/);
  });

  it('gives up with the last error once the wait is spent', async () => {
    const { error, calls } = await failingWith('NATS', refused(), { waitMs: 0 });
    expect((error as { code?: string }).code).toBe('ECONNREFUSED');
    expect(calls).toBe(1);
  });

  it('does not wait on a refusal that waiting cannot change (bad credentials)', async () => {
    const denied = new Error(
      'Handshake terminated by server: 403 (ACCESS-REFUSED) with message "ACCESS_REFUSED"',
    );
    const { error, calls } = await failingWith('RabbitMQ', denied);
    expect((error as Error).message).toMatch(/ACCESS-REFUSED/);
    expect(calls).toBe(1);
  });
});

const amqpUrl = serviceUrl('AMQP_URL');

describe.skipIf(!amqpUrl)('the demo started before RabbitMQ listens', () => {
  const schema = randomSchema();
  let demo: DemoHandle | undefined;
  let proxy: Server | undefined;
  afterAll(async () => {
    await demo?.close();
    proxy?.close();
    await dropDemoSchemas(schema);
  });

  it('waits for it, comes up on RabbitMQ, and its events reach the ledger', async () => {
    const target = new URL(amqpUrl!);
    // A port nobody listens on yet: the broker "starting". A proxy to the real one opens there later.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as AddressInfo).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const lines: string[] = [];
    const log = vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => {
      lines.push(args.map(String).join(' '));
    });
    try {
      const url = new URL(amqpUrl!);
      url.hostname = '127.0.0.1';
      url.port = String(port);
      const starting = startTestDemo(schema, { amqpUrl: url.toString(), brokerWaitMs: 30_000 });
      await until(
        async () => lines.some((line) => line.startsWith('waiting for RabbitMQ')),
        (seen) => seen,
      );
      proxy = createServer((socket) => {
        const upstream = createConnection(Number(target.port || 5672), target.hostname);
        socket.pipe(upstream).pipe(socket);
        socket.on('error', () => upstream.destroy());
        upstream.on('error', () => socket.destroy());
      });
      await new Promise<void>((resolve) => proxy!.listen(port, '127.0.0.1', resolve));
      demo = await starting;
    } finally {
      log.mockRestore();
    }
    expect(demo.transport).toBe('rabbitmq');
    expect(lines.find((line) => line.startsWith('waiting for RabbitMQ'))).not.toMatch(/:guest@/);

    const customer = `early_${randomUUID().slice(0, 8)}`;
    const auth = { authorization: 'Bearer sk_test_acme' };
    const paid = await fetch(`${demo.url}/v1/payments`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json', 'idempotency-key': randomUUID() },
      body: JSON.stringify({ amount: 700, currency: 'eur', customer }),
    });
    expect(paid.status).toBe(201);
    const ledger = await until(
      async () =>
        (await (await fetch(`${demo!.url}/v1/ledger?customer=${customer}`, { headers: auth })).json()) as {
          data: { kind: string }[];
        },
      (l) => l.data.length >= 1,
    );
    expect(ledger.data.map((e) => e.kind)).toEqual(['credit']);
  });
});
