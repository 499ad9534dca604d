/**
 * `idem intents`: an operator sees what the completer is working on, and decides for one that
 * cannot complete; the application's completer carries the decision out.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { run } from '../../src/cli/commands/intents.js';
import { createManualClock } from 'idem/testing';
import { createCompleter, createIdem, isStepFailed } from 'idem';
import { printedBy } from '../support/console-output.js';
import { cliTestSchema, type TestSchema } from '../support/database.js';

let db: TestSchema;
beforeAll(async () => (db = await cliTestSchema()));
afterAll(() => db?.close());

const capture = (argv: string[]) => printedBy(() => run(argv));
/** Acme's transfer, as give-up's arguments name it. */
const transfer = ['--tenant', 'acme', '--operation', 'transfer'];
/** `idem intents give-up` for acme's transfer `key`, with `extra` arguments (`--fail`). */
const giveUp = (key: string, ...extra: string[]) =>
  capture(['give-up', '--schema', db.schema, ...transfer, '--key', key, ...extra]);

describe('idem intents', () => {
  it('lists an intent the completer keeps retrying, and give-up --fail ends it failed', async () => {
    const clock = createManualClock({ startMs: Date.now() });
    const idem = createIdem({ sql: fromPg(db.pool), schema: db.schema, clock, leaseMs: 1000 });
    const stuck = idem.define('transfer', async (op) => {
      await op.step('debit', async () => 'debited');
      await op.call('credit', async () => {
        throw Object.assign(new Error('bank unreachable'), { retryable: true });
      });
      return 'done';
    });
    await expect(stuck.run({ tenant: 'acme', key: 'tr-1', input: { amount: 5 } })).rejects.toMatchObject({
      retryable: true,
    });
    clock.advance(1000);
    const completer = createCompleter({ idem, backoff: { baseMs: 60_000, jitter: 'none' } });
    expect((await completer.runOnce()).map((c) => c.kind)).toEqual(['retrying']);

    const listed = await capture(['list', '--schema', db.schema]);
    expect(listed.code).toBe(0);
    expect(listed.out).toContain('acme  transfer  tr-1  attempts=1  at=call:credit');
    expect(listed.out).toContain('bank unreachable');
    expect(listed.out).toContain('1 pending intent(s)');

    const refused = await giveUp('tr-1');
    expect(refused.code).toBe(2);
    const missing = await giveUp('nope', '--fail');
    expect(missing.code).toBe(1);

    const decided = await giveUp('tr-1', '--fail');
    expect(decided.code).toBe(0);
    // Due at once, despite the minute of backoff.
    expect((await completer.runOnce()).map((c) => c.kind)).toEqual(['failed']);
    const retry = await stuck
      .run({ tenant: 'acme', key: 'tr-1', input: { amount: 5 } })
      .catch((e: unknown) => e);
    expect(isStepFailed(retry)).toBe(true);
    expect((retry as { failure: string }).failure).toContain('by an operator');
    expect((await capture(['list', '--schema', db.schema])).out).toContain('0 pending intent(s)');
  });
});
