import { describe, expect, it } from 'vitest';
import { createManualClock } from 'idem/testing';
import type { Queryable } from 'idem';
import { cutoffBefore, deletedColumn, sweepInBatches } from '../../src/core/sweeper.js';

/** A table of due rows per tenant, deleted `LIMIT $2` at a time, recording every statement. */
function fakeTable(due: Record<string, number>) {
  const calls: { text: string; params: unknown[] }[] = [];
  const db: Queryable = {
    query: async (text: string, params: unknown[] = []) => {
      calls.push({ text, params });
      const limit = params[1] as number;
      const tenants = params.length > 2 ? [params[2] as string] : Object.keys(due);
      let taken = 0;
      for (const tenant of tenants) {
        const n = Math.min(due[tenant] ?? 0, limit - taken);
        due[tenant] = (due[tenant] ?? 0) - n;
        taken += n;
      }
      return { rows: [{ deleted: taken }], rowCount: taken } as never;
    },
  };
  return { db, calls };
}

describe('sweeper', () => {
  const clock = createManualClock();
  const phase = (counts?: 'deleted' | 'cleared') => ({
    statement: 'all',
    tenantStatement: 'one',
    cutoff: cutoffBefore(clock, 1000),
    ...(counts ? { counts } : {}),
  });

  it('answers { deleted, cleared }, batch by batch until a short batch', async () => {
    const { db, calls } = fakeTable({ a: 5, b: 2 });
    expect(await sweepInBatches(db, clock, [phase()], { batchSize: 3 })).toEqual({ deleted: 7, cleared: 0 });
    expect(calls.map((c) => c.text)).toEqual(['all', 'all', 'all']); // 3, 3, 1
    expect(calls[0]!.params[0]).toEqual(new Date(clock.now() - 1000));
  });

  it('pins each batch to one tenant, counts phases apart, and stops at maxBatches per tenant', async () => {
    const { db, calls } = fakeTable({ a: 10, b: 10 });
    const result = await sweepInBatches(
      db,
      clock,
      [phase('cleared'), { ...phase(), rowsOf: deletedColumn }],
      {
        batchSize: 2,
        maxBatches: 2,
        tenants: ['a', 'b'],
      },
    );
    // Per tenant: the first phase takes 2 + 2 (cleared), the second 2 + 2 (deleted).
    expect(result).toEqual({ deleted: 8, cleared: 8 });
    expect(calls.every((c) => c.text === 'one' && c.params.length === 3)).toBe(true);
  });

  it('pauses between batches on the clock, and refuses bad options', async () => {
    const sleeps: number[] = [];
    const recording = { now: () => 0, sleep: async (ms: number) => void sleeps.push(ms) };
    const { db } = fakeTable({ a: 5 });
    await sweepInBatches(db, recording, [phase()], { batchSize: 2, pauseMs: 20 });
    expect(sleeps).toEqual([20, 20]); // between the three batches, not after the last
    await expect(sweepInBatches(db, clock, [phase()], { batchSize: 0 })).rejects.toThrow(/batchSize/);
    expect(() => cutoffBefore(clock, -1)).toThrow(/olderThanMs/);
  });
});
