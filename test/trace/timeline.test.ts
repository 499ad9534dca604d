/**
 * One intent's causation across modules, on a real PostgreSQL: a payment (a multi-step operation)
 * writes an outbox event and a task in a step and makes a call; the in-database transport hands
 * the event to a consumer whose handler runs its own operation; a worker runs the task, which
 * runs one more. `createTrace` (and `idem trace`) then answer "what happened to order 1001?".
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTrace, onBehalfOf, type Sql, type Timeline, type TimelineItem } from 'idem';
import { createInDatabasePublisher, createOutboxDispatcher } from 'idem/outbox';
import { databaseUrl, type TestSchema } from '../support/database.js';
import { createTraceBed, payOrder1001 } from '../support/trace.js';
import { installMemoryTracer, type RecordedSpan } from './memory-tracer.js';

const intent = { tenant: 'acme', operation: 'create-payment', key: 'order-1001' };
const ref = 'acme/create-payment/order-1001';
const traceparentOf = (span: RecordedSpan) => `00-${span.traceId}-${span.spanId}-01`;

describe('an intent traced across modules', () => {
  let db: TestSchema;
  let sql: Sql;
  let spans: RecordedSpan[];
  let timeline: Timeline;
  let eventId: string;
  let chargeKey: string;

  beforeAll(async () => {
    spans = installMemoryTracer();
    // A clock moved by hand: each phase has its own instant, so the order is the causal one.
    const bed = await createTraceBed();
    ({ db, sql } = bed);
    const { schema, clock, idem, inbox, claims } = bed;

    chargeKey = await payOrder1001(bed);

    const publisher = createInDatabasePublisher({
      inbox,
      subscribers: [
        {
          consumer: 'ledger',
          handler: async (tx, event) => {
            await idem.runIn(tx, { tenant: 'acme', operation: 'post-ledger', key: event.id }, () =>
              Promise.resolve({ posted: true }),
            );
          },
        },
      ],
    });
    clock.advance(1000);
    expect((await createOutboxDispatcher({ sql, schema, publisher, clock }).drain()).published).toBe(1);

    clock.advance(1000);
    const [task] = await claims.claim('receipts');
    expect(task?.intent).toBe(ref);
    await claims.run(task!, () =>
      idem.run({ tenant: 'acme', operation: 'send-receipt', key: 'order-1001' }, () => Promise.resolve(1)),
    );

    timeline = (await createTrace({ sql, schema }).intent(intent))!;
    eventId = (timeline.items.find((item) => item.kind === 'outbox') as { id: string }).id;
  });

  afterAll(async () => {
    await db?.close();
  });

  it('lists the request, its steps, the event, its consumption, the task and the caused intents, in causal order', () => {
    expect(timeline.intent).toEqual({ ...intent, ref });
    expect(timeline.items.map((item) => `${item.kind}:${label(item)}`)).toEqual([
      'request:completed',
      // Written together (one step's transaction, one instant of the clock): the step first.
      'step:order',
      'outbox:payment.created',
      'task:receipts',
      'step:charge',
      'consumption:ledger',
      'caused-intent:post-ledger',
      'caused-intent:send-receipt',
    ]);
  });

  it('keeps the derived key of every step and call, and marks the event published', () => {
    const steps = timeline.items.filter((item) => item.kind === 'step');
    expect(steps.find((s) => s.name === 'charge')).toMatchObject({
      stepKind: 'call',
      derivedKey: chargeKey,
      recorded: true,
    });
    expect(steps.find((s) => s.name === 'order')?.derivedKey).toMatch(/^idem_/);
    const event = timeline.items.find((item) => item.kind === 'outbox');
    expect(event).toMatchObject({ topic: 'payments', attempts: 0, deadAt: null });
    expect(event?.publishedAt).not.toBeNull();
    const task = timeline.items.find((item) => item.kind === 'task');
    expect(task).toMatchObject({ state: 'completed', attempts: 1 });
  });

  it('writes the trace context of the operation span on every record, and the consumer joins that trace', () => {
    const run = spans.find((span) => span.name === 'idem.steps')!;
    const event = timeline.items.find((item) => item.kind === 'outbox')!;
    expect(event.traceparent).toBe(traceparentOf(run));
    const consumer = spans.find((span) => span.name === 'idem.inbox.handle')!;
    // Parent, not link: the consumer's span is a child of the producer's.
    expect(consumer).toMatchObject({ traceId: run.traceId, parentSpanId: run.spanId, kind: 4 });
    const consumption = timeline.items.find((item) => item.kind === 'consumption')!;
    expect(consumption.traceparent).toBe(traceparentOf(consumer));
    const taskSpan = spans.find((span) => span.name === 'idem.claims.task')!;
    expect(taskSpan).toMatchObject({ traceId: run.traceId, parentSpanId: run.spanId });
  });

  it('names the intent on the inbox record and on the operations its consumer and its task ran', async () => {
    const { rows } = await sql.query<{ intent: string; traceparent: string }>(
      `SELECT intent, traceparent FROM "${db.schema}".inbox WHERE message_id = $1`,
      [eventId],
    );
    expect(rows).toEqual([
      { intent: ref, traceparent: expect.stringMatching(/^00-[0-9a-f]{32}-/) as string },
    ]);
    const caused = await sql.query<{ operation: string; caused_by: string }>(
      `SELECT operation, caused_by FROM "${db.schema}".requests WHERE caused_by IS NOT NULL ORDER BY operation`,
    );
    expect(caused.rows).toEqual([
      { operation: 'post-ledger', caused_by: ref },
      { operation: 'send-receipt', caused_by: ref },
    ]);
  });

  it('finds the intent back from a message id and from a derived key', async () => {
    const trace = createTrace({ sql, schema: db.schema });
    const byMessage = await trace.message(eventId, { tenant: 'acme' });
    expect(byMessage?.intent.ref).toBe(ref);
    expect(byMessage?.lookup).toEqual({ by: 'message', value: eventId });
    expect((await trace.message(eventId))?.items).toEqual(timeline.items);
    const byKey = await trace.derivedKey(chargeKey);
    expect(byKey?.intent.ref).toBe(ref);
    expect(await trace.derivedKey('idem_unknown')).toBeNull();
    expect(await trace.intent({ tenant: 'acme', operation: 'create-payment', key: 'order-9' })).toBeNull();
  });

  it('prints the same timeline from the CLI, as JSON and for humans', async () => {
    const cli = (...args: string[]) =>
      promisify(execFile)(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'trace', ...args], {
        env: { ...process.env, DATABASE_URL: databaseUrl() },
      });
    const json = await cli('acme', 'create-payment', 'order-1001', '--schema', db.schema, '--json');
    expect(JSON.parse(json.stdout)).toEqual(timeline);
    const human = await cli('--derived-key', chargeKey, '--schema', db.schema);
    expect(human.stdout).toContain(`intent ${ref}`);
    expect(human.stdout).toContain(`found by derived-key ${chargeKey}`);
    expect(human.stdout).toContain('payment.created → payments');
  });
});

describe('onBehalfOf', () => {
  it("names an intent that already happened on what it writes, and the intent's trace lists it", async () => {
    const { db, sql, schema, idem, outbox } = await createTraceBed(2);
    try {
      await idem.run({ ...intent, request: {} }, () => Promise.resolve({ ok: true }));
      // Later, outside any intent (an operator's script, a webhook handler): a reversal of the order.
      const added = await sql.transaction((tx) =>
        onBehalfOf(intent, () =>
          outbox.add(tx, {
            tenant: 'acme',
            topic: 'payments',
            key: 'order-1001',
            type: 'payment.refunded',
            payload: {},
            headers: { 'x-source': 'refund-script' },
          }),
        ),
      );
      const timeline = await createTrace({ sql, schema }).intent(intent);
      expect(timeline!.items.map(label)).toEqual(['completed', 'payment.refunded']);
      // The intent is kept in its column only; it joins the producer's headers when the event is read.
      const row = await db.pool.query(`SELECT intent, headers FROM "${schema}".outbox WHERE id = $1`, [
        added,
      ]);
      expect(row.rows).toEqual([{ intent: ref, headers: { 'x-source': 'refund-script' } }]);
      expect((await outbox.get({ tenant: 'acme', id: added }))?.headers).toEqual({
        'idem-intent': ref,
        'x-source': 'refund-script',
      });
    } finally {
      await db.close();
    }
  });

  it('refuses names an intent cannot have, before running anything', () => {
    let ran = false;
    const run = (scope: typeof intent) => () =>
      onBehalfOf(scope, () => {
        ran = true;
      });
    expect(run({ ...intent, key: '' })).toThrow(expect.objectContaining({ code: 'IDEM_INVALID_KEY' }));
    expect(run({ ...intent, operation: '' })).toThrow(
      expect.objectContaining({ code: 'IDEM_INVALID_ARGUMENT' }),
    );
    expect(ran).toBe(false);
  });
});

/** What tells the items of the expected timeline apart. */
function label(item: TimelineItem): string {
  switch (item.kind) {
    case 'request':
      return item.state;
    case 'step':
      return item.name;
    case 'outbox':
      return item.type;
    case 'consumption':
      return item.consumer;
    case 'task':
      return item.queue;
    case 'caused-intent':
      return item.intent.operation;
    default:
      return item.kind;
  }
}
