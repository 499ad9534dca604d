/**
 * A flood of distinct keys (a client that mints a new key per attempt, or an attacker) keeps the
 * requests table bounded once the sweeper runs: a key's row lives for its tombstone window and
 * no longer, so the table holds at most the keys of one window. Time is a ManualClock: each wave
 * is 30 s of traffic, the retention is short, and nothing sleeps.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { fromPg } from 'idem/pg';
import { createManualClock } from 'idem/testing';
import { completed, createIdem, type Idem } from 'idem';
import { createTestSchema, type TestSchema } from '../support/database.js';

const minute = 60_000;
let db: TestSchema;
let idem: Idem;
const clock = createManualClock();

beforeAll(async () => {
  db = await createTestSchema({ poolSize: 12 });
  // Results replayable for 1 minute, tombstones for 2: the window the table must stay within.
  idem = createIdem({
    sql: fromPg(db.pool),
    schema: db.schema,
    clock,
    retention: { resultMs: minute, tombstoneMs: 2 * minute },
  });
});
afterAll(() => db.close());

const body = new Uint8Array(512).fill(0x42);

async function flood(keys: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: 10 }, async () => {
      while (next < keys) {
        next++;
        await idem.run(
          { tenant: 'flood', operation: 'create', key: `flood-${randomUUID()}`, request: null },
          async () => completed({ ok: true }, { body }),
        );
      }
    }),
  );
}

const rows = async () =>
  (
    await db.pool.query<{ n: number; bodies: number }>(
      `SELECT count(*)::int AS n, count(body)::int AS bodies FROM "${db.schema}".requests`,
    )
  ).rows[0]!;

it('stays within one tombstone window of keys, wave after wave', async () => {
  // Each wave is 30 s of traffic: a tombstone (2 min) spans four waves, a stored result (1 min) two.
  const perWave = 400;
  const sizes: number[] = [];
  for (let wave = 1; wave <= 8; wave++) {
    await flood(perWave);
    const swept = await idem.sweep({ batchSize: 500 });
    const after = await rows();
    sizes.push(after.n);
    expect(after.n).toBeLessThanOrEqual(4 * perWave);
    expect(after.bodies).toBeLessThanOrEqual(2 * perWave);
    // In the steady state each sweep deletes one wave: what came in a window ago.
    if (wave > 4) expect(swept.deleted).toBe(perWave);
    clock.advance(minute / 2 + 1);
  }
  expect(sizes).toEqual([1, 2, 3, 4, 4, 4, 4, 4].map((n) => n * perWave));
  // Without the sweeper the table would hold all 3 200 keys.
}, 120_000);
