/** Throughput of each variant, measured in rotating order so drift hits every variant alike. */
import { closedLoop, type LoadResult } from '../lib/measure.js';
import { samplePayload } from './business.js';
import type { RunningVariant, Variant } from './variant.js';

export interface Contender {
  variant: Variant;
  running: RunningVariant;
}

/** Calls the variant and throws on anything but a success, so a broken variant cannot look fast. */
export async function callOk(contender: Contender, key: string): Promise<void> {
  const answer = await contender.running.call(key, samplePayload);
  if (!answer.ok) throw new Error(`${contender.variant.label} answered ${answer.status} for ${key}`);
}

/**
 * Runs `load` for every contender `rounds` times, starting each round one contender later, and
 * keeps each contender's median round (by throughput).
 */
export async function rotate(
  rounds: number,
  contenders: readonly Contender[],
  load: (contender: Contender, round: number) => Promise<LoadResult>,
): Promise<Map<string, LoadResult>> {
  const samples = new Map<string, LoadResult[]>(contenders.map((c) => [c.variant.id, []]));
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < contenders.length; i++) {
      const contender = contenders[(i + round) % contenders.length]!;
      samples.get(contender.variant.id)!.push(await load(contender, round));
    }
  }
  return new Map(
    [...samples].map(([id, results]) => {
      const sorted = [...results].sort((a, b) => a.opsPerSecond - b.opsPerSecond);
      return [id, sorted[Math.floor(sorted.length / 2)]!];
    }),
  );
}

/** First executions: every call carries a fresh key. */
export const firstExecutions =
  (concurrency: number, durationMs: number, prefix: string) =>
  (contender: Contender, round: number): Promise<LoadResult> =>
    closedLoop(concurrency, durationMs, (worker, iteration) =>
      callOk(contender, `${prefix}-first-${contender.variant.id}-${round}-${worker}-${iteration}`),
    );

/** Finishes `count` keys per contender, `concurrency` at a time, for the replay runs. */
export async function prefill(
  contender: Contender,
  prefix: string,
  count: number,
  concurrency: number,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) await callOk(contender, replayKey(prefix, contender, next++));
    }),
  );
}

const replayKey = (prefix: string, contender: Contender, i: number) =>
  `${prefix}-replay-${contender.variant.id}-${i}`;

/** Replays: every call repeats one of `count` finished keys with the same payload. */
export const replays =
  (concurrency: number, durationMs: number, prefix: string, count: number) =>
  (contender: Contender): Promise<LoadResult> =>
    closedLoop(concurrency, durationMs, (_worker, iteration) =>
      callOk(contender, replayKey(prefix, contender, iteration % count)),
    );
