/**
 * Live counters over Server-Sent Events. One loop serves every open page (one summary query per
 * round, however many pages are open) and runs only while a page is connected.
 *
 * The loop throttles itself: it waits at least `intervalMs`, and at least 4× the last summary's
 * duration, so a console never keeps more than a fifth of one backend busy. Measured on this
 * machine with 500 000 requests and 500 000 inbox rows: one summary took 779 ms (median; the
 * requests and inbox counts scan their tables, see docs/operations/console.md), so it refreshes about every
 * 3.9 s there instead of every 2 s.
 *
 * A page that connects gets the latest summary at once when it is recent, or else the one being
 * read (or the next one): never a query of its own. Each stream used to run the summary when it
 * opened, and 150 streams opened at once ran 150 summaries on the application's pool (a payment
 * went from ~10 ms to 780 ms); now they share one. Streams are capped per client and in total.
 */
import type { ServerResponse } from 'node:http';

/** One summary read shared by everyone who asks while it runs, and reused while it is fresh. */
export interface SharedSummary {
  /** The summary: the one being read, one younger than `maxAgeMs`, or a new read. */
  get(maxAgeMs?: number): Promise<unknown>;
  /** The last summary read and when (`performance.now()`), if any. */
  latest(): { value: unknown; at: number } | undefined;
  /** Forgets the last summary and the read in flight: after a write, the next `get` reads anew. */
  invalidate(): void;
}

export function createSharedSummary(read: () => Promise<unknown>, freshMs: number): SharedSummary {
  let inFlight: Promise<unknown> | undefined;
  let last: { value: unknown; at: number } | undefined;
  return {
    get(maxAgeMs = freshMs) {
      if (inFlight) return inFlight;
      if (last && performance.now() - last.at < maxAgeMs) return Promise.resolve(last.value);
      const reading: Promise<unknown> = read()
        .then((value) => {
          if (inFlight === reading) last = { value, at: performance.now() };
          return value;
        })
        .finally(() => {
          if (inFlight === reading) inFlight = undefined;
        });
      inFlight = reading;
      return reading;
    },
    latest: () => last,
    invalidate() {
      last = undefined;
      inFlight = undefined;
    },
  };
}

export interface LiveFeed {
  /**
   * Whether one more stream from `client` may open: `null` if so, else why not. A stream that is
   * refused gets no summary and costs no query.
   */
  admit(client: string): string | null;
  /** Adds an open response from `client`; it gets a summary at once and then every round. */
  add(response: ServerResponse, client: string): void;
  /** Ends every stream (on server close, so `close()` never waits for open pages). */
  close(): void;
  readonly size: number;
}

export interface LiveFeedOptions {
  summary: SharedSummary;
  intervalMs: number;
  maxPerClient: number;
  maxTotal: number;
  /** Called with a summary read's error; the pages get a message without the database's text. */
  onError: (error: unknown) => void;
}

/** A stream whose client stopped reading is dropped once this much is queued for it. */
const maxQueuedBytes = 256 * 1024;

export function createLiveFeed(options: LiveFeedOptions): LiveFeed {
  const { summary, intervalMs } = options;
  const clients = new Map<ServerResponse, string>();
  const perClient = new Map<string, number>();
  let timer: NodeJS.Timeout | undefined;
  let running = false;
  let closed = false;

  // The summary each stream was last sent: a round that shares the read a new page's first
  // delivery started (a summary slower than the interval) would otherwise send it the same one twice.
  const lastSent = new WeakMap<ServerResponse, unknown>();
  const send = (targets: Iterable<ServerResponse>, event: string, data: unknown) => {
    let frame: string | undefined;
    for (const response of targets) {
      if (event === 'summary' && lastSent.get(response) === data) continue;
      if (event === 'summary') lastSent.set(response, data);
      frame ??= `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
      if (response.writableLength > maxQueuedBytes) response.destroy();
      else response.write(frame);
    }
  };
  const deliver = async (targets: () => Iterable<ServerResponse>): Promise<number> => {
    const started = performance.now();
    try {
      const value = await summary.get();
      send(targets(), 'summary', value);
    } catch (error) {
      options.onError(error);
      send(targets(), 'failure', { message: 'the summary could not be read (see the server log)' });
    }
    return performance.now() - started;
  };
  const schedule = (delayMs: number) => {
    if (closed || timer || clients.size === 0) return;
    timer = setTimeout(() => {
      timer = undefined;
      if (clients.size === 0 || running) return;
      running = true;
      void deliver(() => clients.keys()).then((tookMs) => {
        running = false;
        schedule(Math.max(intervalMs, 4 * tookMs));
      });
    }, delayMs);
    timer.unref();
  };
  const forget = (response: ServerResponse) => {
    const client = clients.get(response);
    if (client === undefined) return;
    clients.delete(response);
    const left = (perClient.get(client) ?? 1) - 1;
    if (left > 0) perClient.set(client, left);
    else perClient.delete(client);
    if (clients.size === 0 && timer) {
      clearTimeout(timer);
      timer = undefined;
    }
  };

  return {
    admit(client) {
      if (closed) return 'the console is shutting down';
      if ((perClient.get(client) ?? 0) >= options.maxPerClient) {
        return `this client already holds ${options.maxPerClient} live streams (the most one client may)`;
      }
      if (clients.size >= options.maxTotal)
        return `the console already serves ${options.maxTotal} live streams`;
      return null;
    },
    add(response, client) {
      clients.set(response, client);
      perClient.set(client, (perClient.get(client) ?? 0) + 1);
      // A page that went away mid-write: forget it (an unhandled 'error' would end the process).
      response.on('error', () => forget(response));
      response.on('close', () => forget(response));
      const latest = summary.latest();
      if (latest && performance.now() - latest.at < intervalMs) send([response], 'summary', latest.value);
      else void deliver(() => (clients.has(response) ? [response] : []));
      schedule(intervalMs);
    },
    close() {
      closed = true;
      if (timer) clearTimeout(timer);
      timer = undefined;
      for (const response of clients.keys()) response.end();
      clients.clear();
      perClient.clear();
    },
    get size() {
      return clients.size;
    },
  };
}
