import { ConcurrentChangeError } from '../core/errors.js';
import type { OutboxEvent } from './types.js';

/**
 * The mark's $1: the ctids the claim read the published events at, how many, and the sum of their
 * `seq` (int8, summed exactly), by which the mark tells whether the rows it found are the batch's.
 */
export function markedRows(published: readonly { row: string; seq: string }[]): string {
  let sum = 0n;
  for (const { seq } of published) sum += BigInt(seq);
  return JSON.stringify({ rows: published.map((p) => p.row), n: published.length, sum: sum.toString() });
}

/**
 * Checks what the mark found at the ctids the claim read (`marked`: the JSON text of the
 * [tenant, id] pairs it marked, or null when their count and sum of seq were the batch's) against
 * the events the batch published, and returns the published events it did not find: their row
 * changed since the claim (see `markStatement`), and they are to be marked by key.
 *
 * Throws `ConcurrentChangeError` when the mark found a row that is not one of the batch's events
 * (its ctid was reused by another row after a vacuum): the batch's transaction then rolls back,
 * so no event is marked that was not sent, and its events are published again (at least once).
 */
export function eventsNotMarked(published: readonly OutboxEvent[], marked: unknown): OutboxEvent[] {
  if (typeof marked !== 'string') return [];
  const pairs = JSON.parse(marked) as [string, string][];
  const sent = new Set(published.map(pairOf));
  const found = new Set<string>();
  for (const [tenant, id] of pairs) {
    const pair = `${tenant}\u0000${id}`;
    if (!sent.has(pair)) {
      throw new ConcurrentChangeError(
        `the outbox mark found event ${id} of tenant '${tenant}' at the place of an event the batch published; ` +
          `the batch is rolled back and its events are published again`,
      );
    }
    found.add(pair);
  }
  return found.size === sent.size ? [] : published.filter((event) => !found.has(pairOf(event)));
}

const pairOf = (event: OutboxEvent) => `${event.tenant ?? ''}\u0000${event.id}`;
