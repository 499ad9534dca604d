/**
 * Publishing one batch so that per-key order holds at the publisher: no event goes out before an
 * earlier event of its key has been confirmed.
 */
import { PublishError } from './errors.js';
import type { OutboxEvent, PublishFailure, Publisher, PublishResult } from './types.js';

/** What a batch's publishing did: the events confirmed, those that failed, and an outage. */
export interface Settled {
  published: OutboxEvent[];
  failed: { event: OutboxEvent; failure: PublishFailure }[];
  /** Set when a publish call threw or timed out: the waves stopped there. */
  outage?: unknown;
}

/**
 * Publishes `events` wave by wave: each wave holds the next event of every key whose earlier
 * events all succeeded. With many keys that is one call per batch; a single hot key costs one
 * call per event. A call that throws or outlasts `timeoutMs` is an outage: `onOutage` hears it
 * and the batch stops, its later waves unsent.
 */
export async function publishInWaves(
  publisher: Publisher,
  events: OutboxEvent[],
  timeoutMs: number,
  onOutage: (error: unknown) => void,
): Promise<Settled> {
  const byKey = new Map<string, OutboxEvent[]>();
  for (const event of events) {
    const id = `${event.tenant ?? ''}\u0000${event.topic}\u0000${event.key}`;
    const list = byKey.get(id);
    if (list) list.push(event);
    else byKey.set(id, [event]);
  }
  const settled: Settled = { published: [], failed: [] };
  // Each run's next event; a run leaves once its event failed or it has none left.
  let runs = [...byKey.values()].map((events) => ({ events, next: 0 }));
  while (runs.length > 0) {
    // A publisher reports results by event id, and two tenants' events may share one (an id the
    // producer chose): a wave holds each id once, and a run whose next id is taken waits a wave.
    const ids = new Set<string>();
    const inWave = runs.filter((run) => {
      const id = run.events[run.next]!.id;
      if (ids.has(id)) return false;
      ids.add(id);
      return true;
    });
    const wave = inWave.map((run) => run.events[run.next]!);
    let results: readonly PublishResult[];
    try {
      results = await publishWithTimeout(publisher, wave, timeoutMs);
    } catch (error) {
      onOutage(error);
      settled.outage = error;
      break;
    }
    const byId = new Map(results.map((r) => [r.id, r]));
    const stopped = new Set<(typeof runs)[number]>();
    for (const run of inWave) {
      const event = run.events[run.next]!;
      const r = byId.get(event.id);
      if (r?.ok) {
        settled.published.push(event);
        if (++run.next === run.events.length) stopped.add(run);
      } else {
        stopped.add(run);
        settled.failed.push({
          event,
          failure: r ?? {
            id: event.id,
            ok: false,
            error: new PublishError(`publisher ${publisher.name ?? ''} returned no result for the event`),
          },
        });
      }
    }
    runs = runs.filter((run) => !stopped.has(run));
  }
  return settled;
}

/** One publish call, abandoned (its signal aborted) after `timeoutMs`. */
async function publishWithTimeout(
  publisher: Publisher,
  wave: OutboxEvent[],
  timeoutMs: number,
): Promise<readonly PublishResult[]> {
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const error = new PublishError(`publish timed out after ${timeoutMs} ms`);
      controller.abort(error);
      reject(error);
    }, timeoutMs);
  });
  try {
    return await Promise.race([publisher.publish(wave, controller.signal), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
