import type { ReadFirst } from './options.js';

/**
 * Below this share of calls that find their key already recorded, `readFirst: 'auto'` skips the
 * read in front. Break-even: the read costs about one statement on every call, and a retry that
 * skips it costs a whole handler transaction that rolls back (about four to five statements), so
 * the read pays from roughly one call in four or five. 0.1 leans towards reading, because a
 * skipped read also runs the handler of a retry, which the read spares.
 */
const readThreshold = 0.1;
/** Weight of the newest call: about the last 32 calls of an operation count. */
const weight = 1 / 32;
/** Operation names are a small set in practice; past this many, the oldest is forgotten. */
const maxOperations = 1024;

/**
 * Decides, per operation name, whether a call reads its key before running the handler. With
 * `'auto'` it keeps a moving share of the calls that found their key recorded (by the read in
 * front, by a conflict at commit, or after a handler failure), so it learns in both states: with
 * the read on from the reads that hit, with it off from the conflicts. It starts on, so a fresh
 * process answers its first retries without running their handlers.
 */
export class ReplayReadPolicy {
  private readonly shares = new Map<string, number>();

  shouldRead(operation: string, setting: ReadFirst): boolean {
    if (setting !== 'auto') return setting;
    return (this.shares.get(operation) ?? 1) >= readThreshold;
  }

  /** Records whether this call found its key already recorded. */
  observe(operation: string, found: boolean): void {
    const previous = this.shares.get(operation);
    if (previous === undefined && this.shares.size >= maxOperations) {
      this.shares.delete(this.shares.keys().next().value!);
    }
    const share = previous ?? 1;
    this.shares.set(operation, share + ((found ? 1 : 0) - share) * weight);
  }
}
