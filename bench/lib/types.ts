/**
 * The contract of every benchmark module under bench/. `bench/run.ts` imports each module, runs it,
 * and writes bench/results/latest.json and bench/report.md.
 */
export interface BenchContext {
  /** A real PostgreSQL; every module creates its own schema in it and drops it afterwards. */
  databaseUrl: string;
  amqpUrl?: string;
  natsUrl?: string;
  redisUrl?: string;
  /** --quick: the whole suite must finish in under 3 minutes on 2 cores. */
  quick: boolean;
  /** Progress line for the console. */
  log(message: string): void;
}

/** One measured figure, with its side-by-side baseline when there is one. */
export interface BenchFigure {
  name: string;
  value: number;
  unit: string;
  /** The baseline measured in the same run, on the same database. */
  baseline?: { name: string; value: number };
  /** value / baseline.value (or the inverse for latencies, as `higherIsBetter` says). */
  ratio?: number;
  higherIsBetter?: boolean;
  /** The target for the ratio or the value, e.g. { ratio: 0.7 } or { max: 100 }. */
  target?: { ratio?: number; min?: number; max?: number; description: string };
  /** Whether the target holds; undefined when there is none. */
  holds?: boolean;
}

export interface BenchSection {
  name: string;
  figures: BenchFigure[];
  /** Where the time goes, what was tuned, and any miss explained. */
  notes: string[];
}

export type BenchModule = (context: BenchContext) => Promise<BenchSection>;
