import { describe, expect, it } from 'vitest';
import { createManualClock } from 'idem/testing';
import { type Clock, systemClock } from 'idem';
import { drainRounds, PollingWorker } from '../../src/core/worker/polling-worker.js';

/** Polls a condition that the loops will make true (bounded: 2 s). */
async function settle(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error('condition not reached');
}

function idleWorker(clock: Clock, concurrency = 2) {
  const state = { rounds: 0, errors: [] as unknown[] };
  const worker = new PollingWorker({
    clock,
    concurrency,
    pollIntervalMs: () => 60_000,
    onError: (error) => state.errors.push(error),
    round: async () => {
      state.rounds++;
      return { idleMs: 60_000 };
    },
  });
  return { worker, state };
}

describe('polling worker', () => {
  for (const [name, clock] of [
    ['system clock', systemClock],
    ['manual clock', createManualClock()],
  ] as const) {
    it(`stop() while idle returns at once, without waiting out the poll interval (${name})`, async () => {
      const { worker, state } = idleWorker(clock);
      await worker.start();
      await settle(() => state.rounds === 2); // both loops are now in their 60 s wait
      const started = performance.now();
      await worker.stop();
      const stoppedInMs = performance.now() - started;
      // Well under 5 ms on either clock (measured); the bound is half the 60 s wait that stop()
      // must not sit out, so a busy machine cannot fail it and a stop that waited would.
      expect(stoppedInMs).toBeLessThan(30_000);
      expect(worker.isRunning).toBe(false);
      if ('waiting' in clock) expect(clock.waiting).toBe(0); // no sleeper left behind
    });
  }

  it('notify() wakes idle loops; a full round runs again at once; stop() waits for the round in flight', async () => {
    const clock = createManualClock();
    let due = 3;
    let release: (() => void) | undefined;
    const seen: number[] = [];
    const worker = new PollingWorker({
      clock,
      pollIntervalMs: () => 1000,
      onError: () => undefined,
      round: async () => {
        seen.push(due);
        if (due === 99) await new Promise<void>((resolve) => (release = resolve));
        if (due > 0 && due !== 99) {
          due--;
          return { idleMs: 0 };
        }
        return { idleMs: 1000 };
      },
    });
    await worker.start();
    await settle(() => seen.length === 4); // 3, 2, 1 at once, then 0 and idle
    expect(seen).toEqual([3, 2, 1, 0]);
    due = 99;
    worker.notify();
    await settle(() => release !== undefined);
    let stopped = false;
    const stopping = worker.stop().then(() => (stopped = true));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(stopped).toBe(false); // the round in flight finishes first
    release!();
    await stopping;
    expect(stopped).toBe(true);
  });

  it('reports a failed round to onError and waits as afterError says (not woken by notify)', async () => {
    const clock = createManualClock();
    const errors: unknown[] = [];
    let rounds = 0;
    const worker = new PollingWorker({
      clock,
      pollIntervalMs: () => 1000,
      onError: (error) => errors.push(error),
      afterError: (failures) => ({ idleMs: 500 * failures, wakeable: false }),
      round: async () => {
        rounds++;
        throw new Error('database down');
      },
    });
    await worker.start();
    await settle(() => rounds === 1);
    worker.notify();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(rounds).toBe(1);
    clock.advance(500);
    await settle(() => rounds === 2);
    clock.advance(999); // the second pause is 1000 ms
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(rounds).toBe(2);
    await worker.stop();
    expect(errors).toHaveLength(2);
  });

  it('drainRounds runs until a round returns nothing', async () => {
    let left = 5;
    const all = await drainRounds(async () => (left > 0 ? [left--, left--].filter((n) => n > 0) : []));
    expect(all).toEqual([5, 4, 3, 2, 1]);
  });
});
