/** Closed-loop load: `concurrency` workers call `op` back to back for `durationMs`. */
export interface LoadResult {
  ops: number;
  seconds: number;
  opsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
}

export async function closedLoop(
  concurrency: number,
  durationMs: number,
  op: (worker: number, iteration: number) => Promise<unknown>,
): Promise<LoadResult> {
  const latencies: number[] = [];
  const started = performance.now();
  const deadline = started + durationMs;
  let iteration = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      while (performance.now() < deadline) {
        const t0 = performance.now();
        await op(worker, iteration++);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return {
    ops: latencies.length,
    seconds,
    opsPerSecond: latencies.length / seconds,
    ...percentiles(latencies),
  };
}

export function percentiles(samples: number[]): { p50Ms: number; p99Ms: number } {
  if (samples.length === 0) return { p50Ms: NaN, p99Ms: NaN };
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return { p50Ms: at(0.5), p99Ms: at(0.99) };
}

/** Runs `a` and `b` alternately `rounds` times and keeps each one's median, so drift hits both. */
export async function sideBySide(
  rounds: number,
  a: () => Promise<LoadResult>,
  b: () => Promise<LoadResult>,
  options: { alternate?: boolean } = {},
): Promise<[LoadResult, LoadResult]> {
  const as: LoadResult[] = [];
  const bs: LoadResult[] = [];
  for (let i = 0; i < rounds; i++) {
    // `alternate`: odd rounds run b first, so neither side always follows the other's work (a
    // drain measured right after the other side's fill and drain paid its checkpoint and vacuum).
    if (options.alternate && i % 2 === 1) {
      bs.push(await b());
      as.push(await a());
    } else {
      as.push(await a());
      bs.push(await b());
    }
  }
  return [median(as), median(bs)];
}

/** The run with the median throughput. */
export function median(results: LoadResult[]): LoadResult {
  const sorted = [...results].sort((x, y) => x.opsPerSecond - y.opsPerSecond);
  return sorted[Math.floor(sorted.length / 2)]!;
}

export const round = (n: number, digits = 2): number => Math.round(n * 10 ** digits) / 10 ** digits;

/**
 * `items` starting at position `round` (mod length): alternating rounds rotate the order, so no
 * variant always runs right after the same neighbour (a run after a plain one measured slower).
 */
export function rotate<T>(items: readonly T[], round: number): T[] {
  const at = round % items.length;
  return [...items.slice(at), ...items.slice(0, at)];
}
