/**
 * One backoff policy for every retry in idem: the dispatcher's and the webhook workers' persisted
 * retries, claims' task retries, the broker consumers' redeliveries, the HTTP client's and the
 * sagas' in-process retries. Each module keeps its own defaults; the option that configures it is
 * called `backoff` everywhere and takes this one shape.
 *
 * What each strategy gives, after `n` failures (n = 1 for the first), with d the undelayed time:
 *
 * | strategy | d | jitter j (`'full'` = 1, `'equal'` = 0.5, `'none'` = 0, or a number 0–1) |
 * | --- | --- | --- |
 * | `exponential` | min(maxMs, baseMs · factor^(n−1)) | d·(1 − j·r): in [d·(1−j), d]; full [0, d], equal [d/2, d] |
 * | `schedule` | delaysMs[min(n, length) − 1] | d·(1 + j·(2r−1)): in [d·(1−j), d·(1+j)] |
 * | `decorrelated` | Polly's DecorrelatedJitterV2: medians near baseMs, 2·baseMs, 4·baseMs, …, each ≤ maxMs | (none: random by construction) |
 *
 * r is the injected random number in [0, 1). A schedule's jitter is centred on its times (a
 * schedule such as the Standard Webhooks one names the typical delay); a curve's only shortens a
 * delay, so `maxMs` stays a true ceiling. `decorrelated` ignores `jitter` (it is random by construction) and needs the
 * previous delay, so only `sequence()` follows it; `delay(n)` (a failure count read back from a
 * row) uses the exponential curve with full jitter for it.
 */
import { InvalidArgumentError } from '../errors.js';
import { nonNegative, positive } from '../validate.js';

/** How much of a delay is random. See the table in this module's header. */
export type Jitter = 'full' | 'equal' | 'none' | number;

/** The one shape of every `backoff` option. Defaults are the module's; each says its own. */
export interface BackoffOptions {
  /** `exponential` (default), `schedule` (the delays of `delaysMs`) or `decorrelated`. */
  strategy?: 'exponential' | 'schedule' | 'decorrelated';
  /** The first delay (exponential), or the scale of the first (decorrelated), in ms. */
  baseMs?: number;
  /** No exponential or decorrelated delay exceeds this, in ms. */
  maxMs?: number;
  /** Growth per failure of `exponential`. Default 2. */
  factor?: number;
  /**
   * How much of each delay is random; see the module's table. Default `'equal'` for the curves,
   * `'none'` for a schedule, unless the module's defaults say otherwise.
   */
  jitter?: Jitter;
  /** `schedule`: the delay after the 1st, 2nd, … failure, in ms; the last one repeats. */
  delaysMs?: readonly number[];
}

/** A backoff with its options resolved. */
export interface ResolvedBackoff {
  /** The delay after `failures` failures (1 = after the first), in whole ms. Stateless. */
  delay(failures: number): number;
  /** A fresh in-memory sequence for retries inside one call: each `next()` is the next delay. */
  sequence(): { next(): number };
}

/** A delay from a failure count: what persisted retries (rows that count attempts) need. */
export type Backoff = (failures: number) => number;

/**
 * Resolves `options` over the module's `defaults` into a policy. `random` returns numbers in
 * [0, 1) (default `Math.random`): inject it to test the ranges.
 */
export function resolveBackoff(
  options: BackoffOptions | undefined,
  defaults: BackoffOptions,
  random: () => number = Math.random,
): ResolvedBackoff {
  const strategy = strategyOf(options ?? {}, strategyOf(defaults)) ?? 'exponential';
  // The module's defaults fill in only options of the same strategy: a caller who swaps a
  // schedule for an exponential curve gets nothing of the schedule.
  const o = strategyOf(defaults) === strategy ? { ...defaults, ...options } : { ...options };
  const jitter = o.jitter ?? (strategy === 'schedule' ? 'none' : 'equal');
  if (typeof jitter === 'number' && !(jitter >= 0 && jitter <= 1)) {
    throw new InvalidArgumentError('backoff jitter must be between 0 and 1');
  }
  if (strategy === 'schedule') {
    const delays = o.delaysMs ?? [];
    if (delays.length === 0) throw new InvalidArgumentError('a backoff schedule needs delaysMs');
    for (const d of delays) nonNegative('backoff delaysMs', d);
    const delay = (failures: number) => {
      const d = delays[Math.min(Math.max(failures, 1), delays.length) - 1]!;
      return Math.round(d * (1 + jitterShare(jitter) * (2 * random() - 1)));
    };
    return { delay, sequence: () => counting(delay) };
  }
  const baseMs = nonNegative('backoff baseMs', o.baseMs ?? 1000);
  const maxMs = nonNegative('backoff maxMs', o.maxMs ?? Number.MAX_SAFE_INTEGER);
  const factor = positive('backoff factor', o.factor ?? 2);
  if (maxMs < baseMs || factor < 1) {
    throw new InvalidArgumentError('backoff needs maxMs >= baseMs and factor >= 1');
  }
  const curve = (failures: number) =>
    Math.min(maxMs, baseMs * factor ** Math.min(Math.max(failures - 1, 0), 64));
  if (strategy === 'decorrelated') {
    return {
      delay: (failures) => Math.round(jittered(curve(failures), 'full', random)),
      sequence: () => decorrelated(baseMs, maxMs, random),
    };
  }
  if (strategy !== 'exponential')
    throw new InvalidArgumentError(`unknown backoff strategy ${String(strategy)}`);
  const delay = (failures: number) => Math.round(jittered(curve(failures), jitter, random));
  return { delay, sequence: () => counting(delay) };
}

/**
 * The strategy `options` ask for: said, or implied by the fields given (`delaysMs`: a schedule;
 * `baseMs`/`maxMs`/`factor`: a curve, the module's own kind of curve when it has one).
 */
function strategyOf(
  options: BackoffOptions,
  fallback?: BackoffOptions['strategy'],
): BackoffOptions['strategy'] {
  if (options.strategy) return options.strategy;
  if (options.delaysMs) return 'schedule';
  if (options.baseMs !== undefined || options.maxMs !== undefined || options.factor !== undefined)
    return fallback === 'decorrelated' ? fallback : 'exponential';
  return fallback;
}

/** `resolveBackoff(...).delay`, for modules that only keep a failure count. */
export function createBackoff(
  options: BackoffOptions | undefined,
  defaults: BackoffOptions,
  random?: () => number,
): Backoff {
  const policy = resolveBackoff(options, defaults, random);
  return (failures) => policy.delay(failures);
}

/** `'full'` is a share of 1, `'equal'` of 1/2, `'none'` of 0. */
function jitterShare(jitter: Jitter): number {
  return jitter === 'full' ? 1 : jitter === 'equal' ? 0.5 : jitter === 'none' ? 0 : jitter;
}

/** d less a random part of its jitter share: random 0 gives d, random near 1 gives d·(1−share). */
function jittered(d: number, jitter: Jitter, random: () => number): number {
  return d * (1 - jitterShare(jitter) * random());
}

function counting(delay: (failures: number) => number): { next(): number } {
  let failures = 0;
  return { next: () => delay(++failures) };
}

/**
 * Polly's DecorrelatedJitterV2 (as cockatiel ships it), with an injectable random: the median
 * delay roughly doubles per retry from `baseMs`, consecutive delays are decorrelated, and none
 * exceeds `maxMs`.
 */
function decorrelated(baseMs: number, maxMs: number, random: () => number): { next(): number } {
  // Constants of the published formula: pFactor smooths the first delay; the scaling factor puts
  // the medians near whole multiples of baseMs.
  const pFactor = 4;
  const rpScalingFactor = 1 / 1.4;
  let attempt = 0;
  let previous = 0;
  return {
    next() {
      const t = attempt + random();
      const next = 2 ** t * Math.tanh(Math.sqrt(pFactor * t));
      const intrinsic = Number.isFinite(next) ? Math.max(0, next - previous) : Infinity;
      attempt++;
      previous = next;
      return Math.round(Math.min(intrinsic * rpScalingFactor * baseMs, maxMs));
    },
  };
}
