/**
 * `idem webhooks parked|skip` on a real PostgreSQL: a sequence entity parked on a gap is listed
 * with what it waits for and why; a skip through the real CLI resumes it, and the waiting version
 * then applies; bad arguments are refused before anything is touched.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { run } from '../../src/cli/commands/webhooks.js';
import { createManualClock } from 'idem/testing';
import {
  createStandardWebhooksVerifier,
  createWebhookProcessor,
  createWebhookReceiver,
  recordHeaders,
} from 'idem/webhooks';
import { cliTestSchema, databaseUrl, type TestSchema } from '../support/database.js';
import { signStandard, standardSecret } from '../webhooks/support.js';
import { printedBy } from '../support/console-output.js';

let db: TestSchema;
beforeAll(async () => (db = await cliTestSchema()));
afterAll(() => db?.close());

const capture = (argv: string[]) => printedBy(() => run(argv));

describe('idem webhooks', () => {
  it('lists a parked entity, and a skip through the CLI resumes it', async () => {
    const clock = createManualClock({ startMs: Date.UTC(2030, 0, 1) });
    const receiver = createWebhookReceiver({
      sql: fromPg(db.pool),
      schema: db.schema,
      clock,
      sources: { billing: createStandardWebhooksVerifier({ secrets: [standardSecret] }) },
    });
    const applied: number[] = [];
    const processor = createWebhookProcessor({
      sql: fromPg(db.pool),
      schema: db.schema,
      clock,
      gapTimeoutMs: 60_000,
      handlers: {
        billing: {
          'ledger.moved': {
            ordering: 'sequence',
            entity: (event) => ({ key: 'acct_1', version: event.json<{ seq: number }>().seq }),
            handle: async (_tx, event) => void applied.push(event.json<{ seq: number }>().seq),
          },
        },
      },
    });
    for (const seq of [1, 4]) {
      const signed = signStandard({
        id: `msg_${seq}`,
        body: JSON.stringify({ type: 'ledger.moved', seq }),
        timestampMs: clock.now(),
      });
      await receiver.receive('billing', { headers: recordHeaders(signed.headers), body: signed.body });
    }
    await processor.drain({ limit: 1 });
    clock.advance(60_000);
    expect(await processor.drain()).toEqual(['parked']);

    const listed = await capture(['parked', '--schema', db.schema]);
    expect(listed.code).toBe(0);
    expect(listed.out).toMatch(/^billing\/acct_1 {2}applied=1 {2}missing=2 {2}waiting=1 \(lowest 4\)/);
    expect(listed.out).toContain('version 2 has not arrived');
    expect(listed.out).toMatch(/1 parked entity$/);
    const json = JSON.parse((await capture(['parked', '--schema', db.schema, '--json'])).out) as unknown[];
    expect(json).toEqual([expect.objectContaining({ scope: 'billing', key: 'acct_1', missingVersion: '2' })]);

    const main = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        '--import',
        'tsx',
        main,
        'webhooks',
        'skip',
        '--scope',
        'billing',
        '--key',
        'acct_1',
        '--reason',
        'the provider lost 2 and 3',
        '--schema',
        db.schema,
      ],
      { env: { ...process.env, DATABASE_URL: databaseUrl() } },
    );
    expect(stdout).toContain('skipped versions 2–3 of billing/acct_1; 1 waiting receipt(s) due again');
    // The skip was stamped with the wall clock; the test's clock is ahead of it.
    expect(await processor.drain()).toEqual(['applied']);
    expect(applied).toEqual([1, 4]);
    expect((await capture(['parked', '--schema', db.schema])).out).toBe('0 parked entities');
  });

  it('refuses bad arguments and an impossible skip with a message, touching nothing', async () => {
    expect((await capture(['skip', '--scope', 'billing', '--schema', db.schema])).code).toBe(2);
    expect((await capture(['parked', '--limit', '0'])).code).toBe(2);
    expect((await capture(['nope'])).code).toBe(2);
    const missing = await capture(['skip', '--scope', 'billing', '--key', 'ghost', '--schema', db.schema]);
    expect(missing).toMatchObject({ code: 1 });
    expect(missing.err).toContain('no webhook entity billing/ghost');
    const nothing = await capture([
      'skip',
      '--scope',
      'billing',
      '--key',
      'acct_1',
      '--through',
      '2',
      '--schema',
      db.schema,
    ]);
    expect(nothing).toMatchObject({ code: 1 });
    expect(nothing.err).toContain('nothing to skip: version 5 is the next one expected');
  });
});
