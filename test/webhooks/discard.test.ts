/**
 * Discarding one webhook receipt (`discardReceipt`, `processor.discard()`, `idem webhooks discard`)
 * on a real PostgreSQL: a `sequence` event far ahead of any real version would wait and keep its
 * entity parked for ever; discarded, it is a dead letter with the operator's reason, the entity is
 * unparked, and the next real version applies at once. Only pending and waiting receipts can be
 * discarded; a redrive brings a discarded one back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../src/adapters/pg.js';
import { run } from '../../src/cli/commands/webhooks.js';
import { ManualClock } from '../../src/core/clock.js';
import {
  createWebhookProcessor,
  createWebhookReceiver,
  recordHeaders,
  createStandardWebhooksVerifier,
} from '../../src/webhooks/index.js';
import { createTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { signStandard, standardSecret } from './support.js';
import { printedBy } from '../support/console-output.js';

let db: TestSchema;
beforeAll(async () => {
  process.env.DATABASE_URL = databaseUrl();
  db = await createTestSchema();
});
afterAll(() => db?.close());

const cli = async (argv: string[]) => {
  const { code, out, err } = await printedBy(() => run([...argv, '--schema', db.schema]));
  return { code, out, err };
};

function setUp(source: string, tenant?: string) {
  const clock = new ManualClock(Date.UTC(2030, 0, 1));
  const sql = fromPg(db.pool);
  const receiver = createWebhookReceiver({
    sql,
    schema: db.schema,
    clock,
    sources: {
      [source]: {
        verifier: createStandardWebhooksVerifier({ secrets: [standardSecret] }),
        ...(tenant ? { tenant } : {}),
      },
    },
  });
  const applied: number[] = [];
  const processor = createWebhookProcessor({
    sql,
    schema: db.schema,
    clock,
    gapTimeoutMs: 60_000,
    handlers: {
      [source]: {
        'ledger.moved': {
          ordering: 'sequence',
          entity: (event) => ({ key: 'acct', version: event.json<{ seq: number }>().seq }),
          handle: async (_tx, event) => void applied.push(event.json<{ seq: number }>().seq),
        },
      },
    },
  });
  const deliver = async (id: string, seq: number) => {
    const signed = signStandard({
      id,
      body: JSON.stringify({ type: 'ledger.moved', seq }),
      timestampMs: clock.now(),
    });
    await receiver.receive(source, { headers: recordHeaders(signed.headers), body: signed.body });
  };
  const receipt = async (id: string) => {
    const { rows } = await db.pool.query<{ state: string; last_error: string | null }>(
      `SELECT state, last_error FROM "${db.schema}".webhook_receipts WHERE source = $1 AND delivery_id = $2`,
      [source, id],
    );
    return rows[0];
  };
  return { clock, processor, applied, deliver, receipt };
}

describe('discarding a webhook receipt', () => {
  it('a version far ahead parks its entity; discarded through the CLI, the entity resumes and the next version applies', async () => {
    const { clock, processor, applied, deliver, receipt } = setUp('ledger-a');
    await deliver('msg_1', 1);
    await deliver('msg_bogus', 1e15);
    await processor.drain({ limit: 1 });
    clock.advance(60_000);
    expect(await processor.drain()).toEqual(['parked']);
    expect(await processor.listParked()).toHaveLength(1);

    const discarded = await cli([
      'discard',
      '--source',
      'ledger-a',
      '--delivery-id',
      'msg_bogus',
      '--reason',
      'a sender bug sent version 1e15',
    ]);
    expect(discarded).toMatchObject({ code: 0, err: '' });
    expect(discarded.out).toBe(
      'discarded ledger-a/msg_bogus (entity ledger-a/acct): waiting → dead; its entity had nothing else waiting and is no longer parked',
    );
    expect(await receipt('msg_bogus')).toEqual({
      state: 'dead',
      last_error: 'discarded by an operator: a sender bug sent version 1e15',
    });
    expect(await processor.listParked()).toEqual([]);
    // Never handled, and nothing of it is left to claim.
    expect(await processor.drain()).toEqual([]);

    await deliver('msg_2', 2);
    expect(await processor.drain()).toEqual(['applied']);
    expect(applied).toEqual([1, 2]);

    // A redrive brings it back like any dead letter: it waits behind its gap again.
    expect(await processor.redrive({ source: 'ledger-a', deliveryIds: ['msg_bogus'] })).toBe(1);
    expect(await processor.drain()).toEqual(['waiting']);
    expect(applied).toEqual([1, 2]);
  });

  it('keeps the entity parked while a real version still waits behind the gap', async () => {
    const { clock, processor, applied, deliver } = setUp('ledger-b');
    await deliver('msg_1', 1);
    await processor.drain();
    await deliver('msg_3', 3);
    await deliver('msg_bogus', 1e15);
    await processor.drain();
    clock.advance(60_000);
    await processor.drain();
    expect(await processor.listParked()).toEqual([expect.objectContaining({ waiting: 2 })]);

    const result = await processor.discard({ source: 'ledger-b', deliveryId: 'msg_bogus', reason: 'bogus' });
    expect(result).toEqual({ from: 'waiting', entity: { scope: 'ledger-b', key: 'acct' }, unparked: false });
    expect(await processor.listParked()).toEqual([
      expect.objectContaining({ waiting: 1, lowestWaitingVersion: '3' }),
    ]);
    await deliver('msg_2', 2);
    await processor.drain();
    expect(applied).toEqual([1, 2, 3]);
  });

  it('discards a pending receipt of a named tenant before any worker saw it; it is never handled', async () => {
    const { processor, applied, deliver, receipt } = setUp('ledger-c', 'acme');
    await deliver('msg_1', 1);
    expect(await cli(['discard', '--source', 'ledger-c', '--delivery-id', 'msg_1'])).toMatchObject({
      code: 1,
      err: 'idem webhooks discard: no webhook receipt ledger-c/msg_1',
    });
    const result = await cli([
      'discard',
      '--source',
      'ledger-c',
      '--delivery-id',
      'msg_1',
      '--tenant',
      'acme',
    ]);
    expect(result).toMatchObject({ code: 0, out: 'discarded ledger-c/msg_1: pending → dead' });
    expect(await receipt('msg_1')).toEqual({
      state: 'dead',
      last_error: 'discarded by an operator: no reason given',
    });
    expect(await processor.drain()).toEqual([]);
    expect(applied).toEqual([]);
  });

  it('refuses a handled receipt, an unknown one and missing arguments, changing nothing', async () => {
    const { processor, deliver, receipt } = setUp('ledger-d');
    await deliver('msg_1', 1);
    expect(await processor.drain()).toEqual(['applied']);
    const handled = await cli(['discard', '--source', 'ledger-d', '--delivery-id', 'msg_1']);
    expect(handled).toMatchObject({
      code: 1,
      err: 'idem webhooks discard: webhook receipt ledger-d/msg_1 is applied: only a pending or waiting receipt can be discarded',
    });
    expect(await receipt('msg_1')).toEqual({ state: 'applied', last_error: null });
    await expect(processor.discard({ source: 'ledger-d', deliveryId: '' })).rejects.toMatchObject({
      code: 'IDEM_INVALID_ARGUMENT',
    });
    await expect(
      processor.discard({ source: 'ledger-d', deliveryId: 'msg_1', tenant: 'bad\u0000tenant' }),
    ).rejects.toMatchObject({ code: 'IDEM_INVALID_ARGUMENT' });
    expect((await cli(['discard', '--source', 'ledger-d'])).code).toBe(2);
    expect((await cli(['discard', '--delivery-id', 'msg_1'])).code).toBe(2);
  });
});
