/** Event channels for tests: one that swallows survived failures, for a test that causes them on purpose. */
import { createEvents, type IdemEvents } from 'idem';

/** A channel whose `error` events go nowhere (without a listener they would be written to stderr). */
export function quietEvents(): IdemEvents {
  const events = createEvents();
  events.on('error', () => undefined);
  return events;
}

/**
 * A channel that collects, into `turnedOff`, the refusals `fromPg` reports when it turns named
 * statements off (an `error` event, source `pg`, where `prepare`); other errors still reach stderr.
 */
export function turnedOffEvents(turnedOff: unknown[]): IdemEvents {
  const events = createEvents();
  events.on('error', ({ source, where, error }) => {
    if (source === 'pg' && where === 'prepare') turnedOff.push(error);
    else console.error(`[idem ${source}] ${where}:`, error);
  });
  return events;
}

/**
 * What broker consumer `name` did, counted from `events`: processed and duplicates as the inbox
 * reports them (after the commit), retried and dead as the consumer does. The listeners are
 * removed by the function pushed onto `closers`.
 */
export function consumerCounts(
  events: IdemEvents,
  name: string,
  closers: (() => Promise<unknown>)[],
): { processed: number; duplicates: number; retried: number; dead: number } {
  const counts = { processed: 0, duplicates: 0, retried: 0, dead: 0 };
  const offs = [
    events.on('inbox:processed', (e) => void (e.consumer === name && counts.processed++)),
    events.on('inbox:duplicate', (e) => void (e.consumer === name && counts.duplicates++)),
    events.on('inbox:retried', (e) => void (e.consumer === name && counts.retried++)),
    events.on('inbox:dead', (e) => void (e.consumer === name && counts.dead++)),
  ];
  closers.push(async () => offs.forEach((off) => off()));
  return counts;
}
