/** Event channels for tests: one that swallows survived failures, for a test that causes them on purpose. */
import { createEvents, type IdemEvents } from '../../src/core/event-channel.js';

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
