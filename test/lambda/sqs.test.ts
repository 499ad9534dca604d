/**
 * SQS batches through `createSqsBatchHandler` against a real PostgreSQL: duplicates inside a batch
 * and across redeliveries, a failing message named alone in `batchItemFailures`, FIFO order, ids
 * taken from the body, and the invocation's remaining time.
 */
import { randomUUID } from 'node:crypto';
import type { SQSRecord } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { isIdemError, isInvalidArgument, type IdemErrorEvent } from 'idem';
import { isMessageWithoutId } from 'idem/inbox';
import { createSqsBatchHandler, type SqsBatchOptions } from 'idem/lambda';
import { createEvents } from 'idem';
import pg from 'pg';
import { billing, useLambdaHarness, lambdaContext, sqsBatchDrills, sqsRecord } from '../support/lambda.js';

const h = useLambdaHarness();

/** A consumer writing one effect row per message, keyed by the body's `key`; `fail` throws. */
function consumer(
  options: Partial<SqsBatchOptions<pg.PoolClient, SQSRecord>> = {},
  errors: IdemErrorEvent[] = [],
) {
  const events = createEvents();
  events.on('error', (error) => errors.push(error));
  return createSqsBatchHandler<pg.PoolClient, SQSRecord>({
    inbox: h.inbox,
    consumer: 'billing',
    events,
    handler: async (tx, record) => {
      const body = JSON.parse(record.body) as { key: string; fail?: boolean };
      if (body.fail) throw new Error('card declined');
      await tx.query(`INSERT INTO "${h.schema}".effects (key, note) VALUES ($1, 'sqs')`, [body.key]);
    },
    ...options,
  });
}

describe('SQS batches', () => {
  it('10 messages, one id three times, one failing: 7 effects, only the failing one named; redelivered: nothing new', async () => {
    await sqsBatchDrills(h, 'direct');
  });

  it('handles a standard queue’s messages several at once, with the same outcome', async () => {
    const run = randomUUID();
    const records = [0, 1, 2, 2, 3, 2, 4, 5].map((i) =>
      sqsRecord(`${run}-${i}`, { key: `${run}-${i}`, fail: i === 4 }),
    );
    const handler = consumer({ concurrency: 4 });
    expect((await handler({ Records: records }, lambdaContext())).batchItemFailures).toEqual([
      { itemIdentifier: `${run}-4` },
    ]);
    for (const i of [0, 1, 2, 3, 5]) expect(await h.effects(`${run}-${i}`)).toBe(1);
    expect(await h.effects(`${run}-4`)).toBe(0);
  });

  it('stops a FIFO batch at its first failure and names it and every later message, so the order is kept', async () => {
    const run = randomUUID();
    const record = (i: number, fail = false) =>
      sqsRecord(`${run}-${i}`, { key: `${run}-${i}`, fail }, { fifo: true });
    const errors: IdemErrorEvent[] = [];
    const first = await consumer(
      {},
      errors,
    )({ Records: [record(0), record(1), record(2, true), record(3), record(4)] });
    expect(first.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([
      `${run}-2`,
      `${run}-3`,
      `${run}-4`,
    ]);
    expect(errors.map((e) => [e.source, e.where])).toEqual([['sqs', 'handler']]);
    const retried = await consumer()({ Records: [record(2), record(3), record(4)] });
    expect(retried.batchItemFailures).toEqual([]);
    for (let i = 0; i < 5; i++) expect(await h.effects(`${run}-${i}`)).toBe(1);
  });

  it('takes the id from the body: a producer’s duplicate under a new SQS messageId has no second effect', async () => {
    const eventId = `evt-${randomUUID()}`;
    const handler = consumer({ messageId: 'powertools_json(body).eventId' });
    const sent = () => sqsRecord(randomUUID(), { eventId, key: eventId });
    await handler({ Records: [sent()] }, lambdaContext());
    await handler({ Records: [sent(), sent()] }, lambdaContext());
    expect(await h.effects(eventId)).toBe(1);
    expect(await h.inbox.get({ consumer: 'billing', messageId: eventId })).toMatchObject({ duplicates: 2 });
  });

  it('fails a message without an id (MessageWithoutIdError), and one whose body is not JSON where the id is read', async () => {
    const errors: IdemErrorEvent[] = [];
    const handler = consumer({ messageId: 'powertools_json(body).eventId' }, errors);
    const noId = sqsRecord(randomUUID(), { key: 'none' });
    const notJson = sqsRecord(randomUUID(), 'plain text');
    const result = await handler({ Records: [noId, notJson] }, lambdaContext());
    expect(result.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([
      noId.messageId,
      notJson.messageId,
    ]);
    expect(errors.map((e) => e.where)).toEqual(['message-id', 'message-id']);
    expect(isMessageWithoutId(errors[0]!.error)).toBe(true);
    expect(isIdemError(errors[1]!.error) && errors[1]!.error.code).toBe('IDEM_BODY_MALFORMED');
  });

  it('starts no message once the remaining time is below reserveMs: each is named, to be redelivered', async () => {
    const run = randomUUID();
    const records = [0, 1, 2].map((i) => sqsRecord(`${run}-${i}`, { key: `${run}-${i}` }));
    const result = await consumer({ reserveMs: 1000 })({ Records: records }, lambdaContext(999));
    expect(result.batchItemFailures).toHaveLength(3);
    for (let i = 0; i < 3; i++) expect(await h.effects(`${run}-${i}`)).toBe(0);
  });

  it('refuses what is not an SQS event, and options without inbox, consumer or handler', async () => {
    await expect(billing(h)({} as never)).rejects.toSatisfy(isInvalidArgument);
    expect(() => createSqsBatchHandler({ consumer: 'x', handler: async () => {} } as never)).toThrow(
      expect.toSatisfy(isInvalidArgument),
    );
    expect(() => createSqsBatchHandler({ inbox: h.inbox, consumer: '', handler: async () => {} })).toThrow(
      expect.toSatisfy(isInvalidArgument),
    );
    expect(() => consumer({ concurrency: 0 })).toThrow(expect.toSatisfy(isInvalidArgument));
  });
});
