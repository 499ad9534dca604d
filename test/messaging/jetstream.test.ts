/**
 * The outbox and the inbox on a real NATS JetStream: PubAck, Nats-Msg-Id and the duplicate
 * window, a pull consumer that acks after commit, nak with delay, term with a dead record, and a
 * consumer killed (SIGKILL) between commit and ack.
 */
import { AckPolicy, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdemEventMap } from 'idem';
import { quietEvents } from '../support/events.js';
import { createJetStreamConsumer, type JetStreamConsumerOptions } from 'idem/inbox';
import { createNatsPublisher, createOutboxDispatcher } from 'idem/outbox';
import { serviceUrl } from '../support/services.js';
import { addedEvent, brokerBed, uniqueName, waitFor } from '../support/brokers.js';

const natsUrl = serviceUrl('NATS_URL');

describe.skipIf(!natsUrl)('NATS JetStream', () => {
  const bed = brokerBed('message_id text NOT NULL');
  const { events, closers, addEvents, effectsPerMessage, recordEffect } = bed;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  const streams = new Set<string>();

  beforeAll(async () => {
    nc = await connect({ servers: natsUrl! });
    jsm = await jetstreamManager(nc);
  });

  afterAll(async () => {
    for (const stream of streams) await jsm.streams.delete(stream).catch(() => undefined);
    await nc.close();
  });

  /** A stream capturing `<name>.>`; events of topic `<name>.events` land in it. */
  async function newStream(prefix: string): Promise<{ stream: string; topic: string }> {
    const stream = uniqueName(prefix);
    streams.add(stream);
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
    return { stream, topic: `${stream}.events` };
  }

  const dispatch = (topic: string) => bed.drain(createNatsPublisher({ connection: nc }), topic);

  const consumer = (stream: string, name: string, extra: Partial<JetStreamConsumerOptions> = {}) =>
    bed.started(
      name,
      createJetStreamConsumer({
        inbox: bed.inbox,
        consumer: name,
        connection: nc,
        stream,
        durable: name,
        retryDelaysMs: [100],
        handler: (tx, message) => recordEffect(tx, message.id),
        ...extra,
      }),
    );

  it('publishes, waits for the PubAck, and sets Nats-Msg-Id so a republish is dropped by the stream', async () => {
    const { stream, topic } = await newStream('publish');
    const [id] = await addEvents(topic, 1);
    expect(await dispatch(topic)).toBe(1);
    const stored = await jsm.streams.getMessage(stream, { seq: 1 });
    expect(stored?.header.get('Nats-Msg-Id')).toBe(id);
    expect(stored?.header.get('Idem-Key')).toBe('k');
    expect(stored?.json()).toEqual({ i: 0, key: 'k' });

    // The same event again (a dispatcher that crashed before marking): inside the duplicate
    // window JetStream answers "duplicate", which is a success, and stores nothing new.
    const publisher = createNatsPublisher({ connection: nc });
    expect(await publisher.publish([addedEvent(id!, topic)], new AbortController().signal)).toEqual([
      { id, ok: true },
    ]);
    expect((await jsm.streams.info(stream)).state.messages).toBe(1);
  });

  it('a subject no stream captures is a per-event failure that parks the event', async () => {
    const { topic } = await newStream('nostream');
    const lostTopic = uniqueName('nowhere');
    const [lost] = await addEvents(lostTopic, 1);
    await addEvents(topic, 1);
    const publisher = createNatsPublisher({ connection: nc, timeoutMs: 1000 });
    const dispatcher = createOutboxDispatcher({
      sql: bed.sql,
      publisher,
      schema: bed.db.schema,
      topics: [lostTopic, topic],
      maxAttempts: 1,
      events: quietEvents(),
    });
    const result = await dispatcher.drain();
    expect(result).toMatchObject({ published: 1, dead: 1 });
    expect((await bed.outbox.get({ id: lost! }))?.deadAt).not.toBeNull();
  });

  it('an event of a named tenant reaches the consumer’s inbox under that tenant', async () => {
    const { stream, topic } = await newStream('tenants');
    const ids: Record<string, string> = {};
    await bed.sql.transaction(async (tx) => {
      for (const tenant of ['acme', 'globex']) {
        ids[tenant] = await bed.outbox.add(tx, {
          tenant,
          topic,
          key: 'k',
          type: 'test.event',
          payload: { tenant },
        });
      }
      ids[''] = await bed.outbox.add(tx, { topic, key: 'k', type: 'test.event', payload: {} });
    });
    expect(await dispatch(topic)).toBe(3);
    const seen: string[] = [];
    await consumer(stream, 'tenant-ledger', {
      handler: async (tx, message, context) => {
        seen.push(String(context.tenant));
        await recordEffect(tx, message.id);
      },
    });
    await waitFor(
      async () => (await effectsPerMessage(Object.values(ids))).every((n) => n === 1),
      'all three',
    );
    expect(seen.sort()).toEqual(['', 'acme', 'globex']);
    for (const [tenant, id] of Object.entries(ids)) {
      expect(await bed.inbox.get({ tenant, consumer: 'tenant-ledger', messageId: id })).toMatchObject({
        tenant,
      });
    }
  });

  it('consumer: acks after commit; the consumer has nothing pending afterwards', async () => {
    const { stream, topic } = await newStream('consume');
    const ids = await addEvents(topic, 10, ['a', 'b']);
    await dispatch(topic);
    const c = await consumer(stream, 'consume');
    await waitFor(() => c.counts.processed === 10, 'ten messages');
    expect(await effectsPerMessage(ids)).toEqual(ids.map(() => 1));
    // Reported at the commit; the ack follows.
    await waitFor(async () => (await jsm.consumers.info(stream, 'consume')).num_ack_pending === 0, 'acked');
    expect((await jsm.consumers.info(stream, 'consume')).num_pending).toBe(0);
  });

  it('naks with a delay, then terms after N deliveries and records the message as dead; others flow', async () => {
    const { stream, topic } = await newStream('poison');
    const seen: { id: string; attempt: number; at: number }[] = [];
    const [poisonId] = await addEvents(topic, 1, ['poison']);
    const good = await addEvents(topic, 10, ['a', 'b']);
    await dispatch(topic);
    const dead: IdemEventMap['inbox:dead'][] = [];
    const off = events.on('inbox:dead', (e) => void dead.push(e));
    closers.push(async () => off());
    const c = await consumer(stream, 'poison', {
      maxAttempts: 3,
      retryDelaysMs: [500],
      handler: bed.poisonHandler(seen),
    });
    await waitFor(() => c.counts.dead === 1, 'the poison message to be termed');
    const attempts = seen.filter((s) => s.id === poisonId);
    expect(attempts.map((s) => s.attempt)).toEqual([1, 2, 3]);
    expect(attempts[1]!.at - attempts[0]!.at).toBeGreaterThanOrEqual(450);
    const lastGood = Math.max(...seen.filter((s) => good.includes(s.id)).map((s) => s.at));
    expect(lastGood).toBeLessThan(attempts[1]!.at);
    expect(c.counts).toMatchObject({ processed: 10, retried: 2, dead: 1 });
    expect(dead).toEqual([
      {
        consumer: 'poison',
        messageId: poisonId,
        attempts: 3,
        error: 'Error: cannot apply poison',
        origin: `${stream}/${topic}`,
      },
    ]);
    const record = await bed.inbox.get({ consumer: 'poison', messageId: poisonId! });
    expect(record).toMatchObject({ state: 'dead', attempts: 3, lastError: 'Error: cannot apply poison' });
    expect(JSON.parse(Buffer.from(record!.payload!).toString())).toEqual({ i: 0, key: 'poison' });
    expect(record!.headers).toMatchObject({ 'Nats-Msg-Id': poisonId });
    // Termed: the server will not deliver it again.
    await waitFor(
      async () => (await jsm.consumers.info(stream, 'poison')).num_ack_pending === 0,
      'no pending acks',
    );
  });

  it('seed scenario 4: the consumer commits, is killed (SIGKILL) before the ack; the redelivery has no second effect', async () => {
    const { stream, topic } = await newStream('scenario4');
    const durable = 'scenario4';
    await jsm.consumers.add(stream, {
      durable_name: durable,
      ack_policy: AckPolicy.Explicit,
      max_deliver: -1,
      ack_wait: 1_000_000_000, // 1 s: the server redelivers an unacked message after it
    });
    const [id] = await addEvents(topic, 1);
    await dispatch(topic);
    const child = bed.spawn('jetstream-consumer.ts', {
      NATS_URL: natsUrl!,
      STREAM: stream,
      DURABLE: durable,
      CONSUMER: 'scenario4',
    });
    expect((await child.exited).signal).toBe('SIGKILL');
    expect(child.output.join('\n')).toContain('committed, not acked');
    expect(await effectsPerMessage([id!])).toEqual([1]);

    const c = await consumer(stream, durable, {
      create: false,
      handler: async () => {
        throw new Error('the handler must not run again');
      },
    });
    await waitFor(() => c.counts.duplicates === 1, 'the redelivery to be acked as a duplicate');
    expect(c.counts).toMatchObject({ processed: 0, duplicates: 1, dead: 0, retried: 0 });
    expect(await effectsPerMessage([id!])).toEqual([1]);
    await waitFor(async () => (await jsm.consumers.info(stream, durable)).num_ack_pending === 0, 'acked');
  });

  it('NATS unreachable, then back: nothing is lost, nothing is parked', async () => {
    const { stream, topic } = await newStream('outage');
    const proxy = await bed.proxyTo(natsUrl!, 4222);
    const viaProxy = await connect({
      servers: `nats://127.0.0.1:${proxy.port}`,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 50,
      ignoreClusterUpdates: true,
    });
    closers.push(() => viaProxy.close());
    const reported = quietEvents();
    let outages = 0;
    reported.on('outbox:outage', () => outages++);
    const publisher = createNatsPublisher({ connection: viaProxy, timeoutMs: 300 });
    await bed.startOutageDispatcher(publisher, topic, reported);

    const before = await addEvents(topic, 5, ['a', 'b']);
    await waitFor(async () => (await bed.pending(topic)) === 0, 'first events published');
    await proxy.cut();
    const during = await addEvents(topic, 5, ['a', 'c']);
    await waitFor(() => outages >= 2, 'the dispatcher to see the outage');
    await proxy.restore();
    await waitFor(async () => (await bed.pending(topic)) === 0, 'everything published after the outage');
    expect((await bed.outbox.stats({ topic })).dead).toBe(0);

    const c = await consumer(stream, 'outage');
    const all = [...before, ...during];
    await waitFor(() => c.counts.processed === all.length, 'every event consumed');
    expect(await effectsPerMessage(all)).toEqual(all.map(() => 1));
  });
});
