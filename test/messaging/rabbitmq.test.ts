/**
 * The outbox and the inbox on a real RabbitMQ: publisher confirms, ack after commit, delayed
 * retries, dead letters, crashes of real processes (SIGKILL), and a broker outage.
 */
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEvents, type IdemErrorEvent, type IdemEventMap, type IdemEvents } from 'idem';
import { quietEvents } from '../support/events.js';
import { createRabbitMqConsumer } from 'idem/inbox';
import {
  createOutboxDispatcher,
  createRabbitMqPublisher,
  type OutboxEvent,
  type Publisher,
  type RabbitMqPublisher,
} from 'idem/outbox';
import { orderViolations } from '../outbox/support.js';
import { serviceUrl } from '../support/services.js';
import { addedEvent, brokerBed, uniqueName, waitFor } from '../support/brokers.js';

const amqpUrl = serviceUrl('AMQP_URL');

describe.skipIf(!amqpUrl)('RabbitMQ', () => {
  /** Errors on the bed's channel are expected (the outage test). */
  const bed = brokerBed('message_id text NOT NULL, payload jsonb');
  const { events, closers, addEvents, effectsPerMessage } = bed;
  let admin: ChannelModel;
  let channel: Channel;
  const queues = new Set<string>();

  beforeAll(async () => {
    admin = await amqp.connect(amqpUrl!);
    channel = await admin.createChannel();
  });

  afterAll(async () => {
    for (const queue of queues) await channel.deleteQueue(queue).catch(() => undefined);
    await admin.close();
  });

  async function newQueue(prefix: string): Promise<string> {
    const queue = uniqueName(prefix);
    queues.add(queue);
    await channel.assertQueue(queue, { durable: true });
    return queue;
  }

  const effectCount = async (messageId?: string): Promise<number> =>
    Number(
      (
        await bed.sql.query(
          `SELECT count(*)::int AS n FROM "${bed.db.schema}".effects WHERE $1::text IS NULL OR message_id = $1`,
          [messageId ?? null],
        )
      ).rows[0]!.n,
    );

  function publisherTo(queue: string, url = amqpUrl!): RabbitMqPublisher {
    const publisher = createRabbitMqPublisher({
      connection: url,
      route: () => ({ exchange: '', routingKey: queue }),
    });
    closers.push(() => publisher.close());
    return publisher;
  }

  /** Every event of `queue`'s topic published to `queue` once; how many were. */
  const drainTo = (queue: string) => bed.drain(publisherTo(queue), queue);

  async function consumer(
    queue: string,
    name: string,
    extra: Partial<Parameters<typeof createRabbitMqConsumer>[0]> = {},
  ) {
    const c = await bed.started(
      name,
      createRabbitMqConsumer({
        inbox: bed.inbox,
        consumer: name,
        queue,
        connection: amqpUrl!,
        retryDelaysMs: [100],
        handler: async (tx, message) => {
          await tx.query(`INSERT INTO "${bed.db.schema}".effects (message_id, payload) VALUES ($1, $2)`, [
            message.id,
            message.body.toString('utf8'),
          ]);
        },
        ...extra,
      }),
    );
    for (const q of c.queues) queues.add(q);
    return c;
  }

  /** A quiet channel that adds the events each dispatcher published to `published[i]`. */
  function countingPublished(published: number[], i: number): IdemEvents {
    const counted = quietEvents();
    counted.on('outbox:published', ({ events }) => (published[i]! += events.length));
    return counted;
  }

  it('publishes with confirms, the event id as message_id, and the payload as JSON', async () => {
    const queue = await newQueue('publish');
    const [id] = await addEvents(queue, 1);
    expect(await drainTo(queue)).toBe(1);
    const message = await channel.get(queue, { noAck: true });
    expect(message).not.toBe(false);
    if (message === false) return;
    expect(message.properties.messageId).toBe(id);
    expect(message.properties.type).toBe('test.event');
    expect(message.properties.deliveryMode).toBe(2);
    expect(message.properties.headers).toMatchObject({ 'idem-key': 'k', 'idem-topic': queue });
    expect(JSON.parse(message.content.toString())).toEqual({ i: 0, key: 'k' });
  });

  it('an unroutable event is a failure, not a silent drop; it parks as dead and other keys flow', async () => {
    const queue = await newQueue('unroutable');
    const ids = await addEvents(queue, 4, ['lost', 'fine']);
    const publisher = createRabbitMqPublisher({
      connection: amqpUrl!,
      route: (event) => ({ exchange: '', routingKey: event.key === 'lost' ? uniqueName('nowhere') : queue }),
    });
    closers.push(() => publisher.close());
    const dispatcher = createOutboxDispatcher({
      sql: bed.sql,
      publisher,
      schema: bed.db.schema,
      topics: [queue],
      maxAttempts: 2,
      backoff: { baseMs: 1, maxMs: 1 },
      events: quietEvents(),
    });
    await dispatcher.drain();
    await new Promise((r) => setTimeout(r, 20));
    await dispatcher.drain();
    const lost = await bed.outbox.get({ id: ids[0]! });
    expect(lost?.deadAt).not.toBeNull();
    expect(lost?.lastError).toMatch(/unroutable/);
    expect((await channel.checkQueue(queue)).messageCount).toBe(2);
  });

  it('an event of a named tenant reaches the consumer’s inbox under that tenant, even with another tenant’s id', async () => {
    const queue = await newQueue('tenants');
    const id = '0190f5b4-7c1e-7000-8000-00000000a11d';
    await bed.sql.transaction(async (tx) => {
      for (const tenant of ['acme', 'globex']) {
        await bed.outbox.add(tx, {
          tenant,
          id,
          topic: 'tenants',
          key: 'k',
          type: 'test.event',
          payload: { tenant },
        });
      }
    });
    const publisher = publisherTo(queue);
    expect(await bed.drain(publisher, 'tenants')).toBe(2);
    const seen: string[] = [];
    await consumer(queue, 'tenant-ledger', {
      handler: async (tx, message, context) => {
        seen.push(`${context.tenant}:${String(message.headers['idem-tenant'])}`);
        await bed.recordEffect(tx, message.id);
      },
    });
    await waitFor(async () => (await effectCount(id)) === 2, 'both tenants’ events');
    expect(seen.sort()).toEqual(['acme:acme', 'globex:globex']);
    for (const tenant of ['acme', 'globex']) {
      expect(await bed.inbox.get({ tenant, consumer: 'tenant-ledger', messageId: id })).toMatchObject({
        tenant,
        state: 'processed',
      });
    }
    expect(await bed.inbox.get({ consumer: 'tenant-ledger', messageId: id })).toBeNull();
  });

  it('consumer: acks after commit; a duplicate delivery is acked without a second effect', async () => {
    const queue = await newQueue('dedupe');
    const ids = await addEvents(queue, 5);
    const publisher = publisherTo(queue);
    await bed.drain(publisher, queue);
    // The same events published a second time (a dispatcher that lost its marks).
    await publisher.publish(
      ids.map((id, i) => addedEvent(id, queue, i)),
      new AbortController().signal,
    );
    const c = await consumer(queue, 'dedupe');
    await waitFor(() => c.counts.processed + c.counts.duplicates === 10, 'ten deliveries');
    expect(c.counts).toMatchObject({ processed: 5, duplicates: 5, retried: 0, dead: 0 });
    expect(await effectsPerMessage(ids)).toEqual([1, 1, 1, 1, 1]);
    await waitFor(async () => (await channel.checkQueue(queue)).messageCount === 0, 'empty queue');
  });

  it('retries later with an attempt count, then dead-letters with the reason, without blocking the queue', async () => {
    const queue = await newQueue('poison');
    const seen: { id: string; attempt: number; at: number }[] = [];
    const reported: string[] = [];
    const offs = [
      events.on('inbox:retried', (e: IdemEventMap['inbox:retried']) => {
        if (e.consumer === 'poison') reported.push(`retried ${e.attempt} in ${e.retryInMs}: ${e.error}`);
      }),
      events.on('inbox:dead', (e: IdemEventMap['inbox:dead']) => {
        if (e.consumer === 'poison') reported.push(`dead ${e.messageId} after ${e.attempts} at ${e.origin}`);
      }),
    ];
    closers.push(async () => offs.forEach((off) => off()));
    const c = await consumer(queue, 'poison', {
      maxAttempts: 3,
      retryDelaysMs: [1000],
      handler: bed.poisonHandler(seen),
    });
    const [poisonId] = await addEvents(queue, 1, ['poison']);
    const good = await addEvents(queue, 20, ['a', 'b', 'c']);
    await drainTo(queue);

    await waitFor(() => c.counts.dead === 1, 'the poison message to be dead-lettered');
    expect(c.counts.processed).toBe(20);
    expect(c.counts.retried).toBe(2);
    expect(reported).toEqual([
      'retried 1 in 1000: Error: cannot apply poison',
      'retried 2 in 1000: Error: cannot apply poison',
      `dead ${poisonId} after 3 at ${queue}`,
    ]);
    const poisonAttempts = seen.filter((s) => s.id === poisonId);
    expect(poisonAttempts.map((s) => s.attempt)).toEqual([1, 2, 3]);
    // Delayed: each retry came at least the retry delay after the previous attempt.
    expect(poisonAttempts[1]!.at - poisonAttempts[0]!.at).toBeGreaterThanOrEqual(990);
    // Not blocking: every good message was handled before the poison's second attempt.
    const lastGood = Math.max(...seen.filter((s) => good.includes(s.id)).map((s) => s.at));
    expect(lastGood).toBeLessThan(poisonAttempts[1]!.at);
    expect(await effectsPerMessage(good)).toEqual(good.map(() => 1));

    const dead = await channel.get(`${queue}.dead`, { noAck: true });
    expect(dead).not.toBe(false);
    if (dead === false) return;
    expect(dead.properties.messageId).toBe(poisonId);
    expect(dead.properties.headers).toMatchObject({
      'x-idem-attempts': 3,
      'x-idem-error': 'Error: cannot apply poison',
      'x-idem-consumer': 'poison',
    });
    const record = await bed.inbox.get({ consumer: 'poison', messageId: poisonId! });
    expect(record).toMatchObject({
      state: 'dead',
      attempts: 3,
      lastError: 'Error: cannot apply poison',
      origin: queue,
    });
    expect(JSON.parse(Buffer.from(record!.payload!).toString())).toEqual({ i: 0, key: 'poison' });
  });

  it('seed scenario 4: the consumer commits, is killed (SIGKILL) before the ack; the redelivery has no second effect', async () => {
    const queue = await newQueue('scenario4');
    const [id] = await addEvents(queue, 1);
    await drainTo(queue);

    const child = bed.spawn('rabbitmq-consumer.ts', {
      AMQP_URL: amqpUrl!,
      QUEUE: queue,
      CONSUMER: 'scenario4',
    });
    const exit = await child.exited;
    expect(exit.signal).toBe('SIGKILL');
    expect(child.output.join('\n')).toContain('committed, not acked');
    expect(await effectCount(id)).toBe(1);

    // A new consumer of the same name: the broker redelivers the unacked message.
    const errors: IdemErrorEvent[] = [];
    const off = events.on('error', (e) => errors.push(e));
    closers.push(async () => off());
    const c = await consumer(queue, 'scenario4', {
      handler: async () => {
        throw new Error('the handler must not run again');
      },
    });
    await waitFor(() => c.counts.duplicates === 1, 'the redelivery to be acked as a duplicate');
    expect(c.counts).toMatchObject({ processed: 0, duplicates: 1, dead: 0, retried: 0 });
    expect(await effectCount(id)).toBe(1);
    expect((await bed.inbox.get({ consumer: 'scenario4', messageId: id! }))?.duplicates).toBe(1);
    await waitFor(async () => (await channel.checkQueue(queue)).messageCount === 0, 'empty queue');
    expect(errors).toEqual([]);
  });

  it('seed scenario 6: the dispatcher publishes, is killed before marking; the event goes out twice and the inbox dedupes', async () => {
    const queue = await newQueue('scenario6');
    const ids = await addEvents(queue, 3, ['a', 'b', 'c']);
    const child = bed.spawn('dispatcher.ts', {
      AMQP_URL: amqpUrl!,
      QUEUE: queue,
      TRANSPORT: 'rabbitmq',
      CRASH: 'after-publish',
    });
    expect((await child.exited).signal).toBe('SIGKILL');
    expect(await bed.pending(queue)).toBe(3);
    expect((await channel.checkQueue(queue)).messageCount).toBe(3);

    // The next dispatcher finds them unmarked and publishes them again.
    expect(await drainTo(queue)).toBe(3);
    expect((await channel.checkQueue(queue)).messageCount).toBe(6);

    const c = await consumer(queue, 'scenario6');
    await waitFor(() => c.counts.processed + c.counts.duplicates === 6, 'six deliveries');
    expect(c.counts).toMatchObject({ processed: 3, duplicates: 3 });
    expect(await effectsPerMessage(ids)).toEqual([1, 1, 1]);
  });

  it('a dispatcher killed mid-batch loses nothing: every event takes effect exactly once', async () => {
    const queue = await newQueue('midbatch');
    const ids = await addEvents(queue, 40, ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h']);
    const child = bed.spawn('dispatcher.ts', {
      AMQP_URL: amqpUrl!,
      QUEUE: queue,
      TRANSPORT: 'rabbitmq',
      CRASH: 'mid-batch',
      BATCH: '40',
    });
    expect((await child.exited).signal).toBe('SIGKILL');
    const afterCrash = (await channel.checkQueue(queue)).messageCount;
    expect(afterCrash).toBeGreaterThan(0);
    expect(afterCrash).toBeLessThan(40);

    expect(await drainTo(queue)).toBe(40);
    const c = await consumer(queue, 'midbatch');
    await waitFor(() => c.counts.processed === 40, 'every event processed');
    await waitFor(async () => (await channel.checkQueue(queue)).messageCount === 0, 'empty queue');
    expect(c.counts.duplicates).toBe(afterCrash);
    expect(await effectsPerMessage(ids)).toEqual(ids.map(() => 1));
  });

  it('the broker is unreachable, then back: nothing is lost, nothing is parked', async () => {
    const queue = await newQueue('outage');
    const proxy = await bed.proxyTo(amqpUrl!, 5672);
    const viaProxy = new URL(amqpUrl!);
    viaProxy.hostname = '127.0.0.1';
    viaProxy.port = String(proxy.port);

    const outages: unknown[] = [];
    const errors: IdemErrorEvent[] = [];
    const reported = createEvents();
    reported.on('outbox:outage', ({ error }) => outages.push(error));
    reported.on('error', (e) => errors.push(e));
    await bed.startOutageDispatcher(publisherTo(queue, viaProxy.toString()), queue, reported);

    const before = await addEvents(queue, 10, ['a', 'b']);
    await waitFor(async () => (await bed.pending(queue)) === 0, 'first events published');
    await proxy.cut();
    const during = await addEvents(queue, 10, ['a', 'b', 'c']);
    await waitFor(() => outages.length >= 3, 'the dispatcher to see the outage');
    expect(await bed.pending(queue)).toBe(10);
    await proxy.restore();
    await waitFor(async () => (await bed.pending(queue)) === 0, 'everything published after the outage');

    const stats = await bed.outbox.stats({ topic: queue });
    expect(stats.dead).toBe(0);
    // Each outage is also an error the dispatcher survived, where it published.
    const publishErrors = errors.filter((e) => e.source === 'dispatcher' && e.where === 'publish');
    expect(publishErrors.length).toBeGreaterThanOrEqual(outages.length);
    const c = await consumer(queue, 'outage');
    const all = [...before, ...during];
    await waitFor(() => c.counts.processed === all.length, 'every event consumed');
    expect(await effectsPerMessage(all)).toEqual(all.map(() => 1));
  });

  it('per-key order holds with two dispatchers through the broker, with random publish failures', async () => {
    const queue = await newQueue('order');
    const keys = ['a', 'b', 'c', 'd'];
    const order = new Map<string, number>();
    const perKey = 15;
    /** The real publisher, failing some events before they reach the broker. */
    const flaky = (inner: Publisher): Publisher => ({
      publish: async (events, signal) => {
        const refused = new Set(events.filter(() => Math.random() < 0.3).map((e) => e.id));
        const sent = await inner.publish(
          events.filter((e) => !refused.has(e.id)),
          signal,
        );
        return [
          ...sent,
          ...[...refused].map((id) => ({ id, ok: false as const, error: new Error('flaky') })),
        ];
      },
    });
    const published = [0, 0];
    const dispatchers = [0, 1].map((i) =>
      createOutboxDispatcher({
        sql: bed.sql,
        publisher: flaky(publisherTo(queue)),
        schema: bed.db.schema,
        topics: [queue],
        batchSize: 5,
        pollIntervalMs: 5,
        maxAttempts: 1000,
        backoff: { baseMs: 1, maxMs: 5 },
        events: countingPublished(published, i),
      }),
    );
    // The whole backlog first, then both dispatchers at once: they compete for its batches (with
    // events added one round at a time, a fast dispatcher could take every batch alone).
    for (let i = 0; i < perKey; i++) {
      const ids = await addEvents(queue, keys.length, keys);
      ids.forEach((id) => order.set(id, i));
    }
    await Promise.all(dispatchers.map((d) => d.start()));
    for (const d of dispatchers) closers.push(() => d.stop());
    // A dispatcher that just settled a batch claims the next one at once, so on a quiet machine one
    // of the two can take every batch. Once a third is out, stop the busier one: the other must
    // carry on from where it left, failed events and all, without breaking any key's order.
    await waitFor(async () => (await bed.pending(queue)) <= 40, 'a third published', 30_000);
    const busier = published[0]! >= published[1]! ? 0 : 1;
    await dispatchers[busier]!.stop();
    await waitFor(async () => (await bed.pending(queue)) === 0, 'everything published', 30_000);
    expect(published.every((n) => n > 0)).toBe(true);

    // One consumer, prefetch 1: it sees the queue's order, which is the order of the confirms.
    const arrived: OutboxEvent[] = [];
    const c = await consumer(queue, 'order', {
      prefetch: 1,
      handler: async (_tx, message) => {
        const body = message.json<{ key: string }>();
        arrived.push({ id: message.id, topic: queue, key: body.key } as OutboxEvent);
      },
    });
    await waitFor(() => c.counts.processed === order.size, 'every event consumed');
    expect(orderViolations(arrived, order)).toEqual([]);
  });
});
