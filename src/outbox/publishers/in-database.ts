/**
 * The in-database transport: the outbox delivers straight into consumers' inboxes in the same
 * PostgreSQL. No broker to run, the same guarantees (per-key order, retries, dead events, redrive
 * come from the dispatcher; dedupe from the inbox). The default for embedded setups and tests.
 */
import type { Inbox, InboxContext } from '../../inbox/inbox.js';
import type { Transaction } from '../../core/sql.js';
import type { OutboxEvent, Publisher, PublishResult } from '../types.js';

/** A consumer of events: runs in its own transaction with the inbox record of (tenant, consumer, event id). */
export type EventHandler<Client = unknown> = (
  tx: Transaction<Client>,
  event: OutboxEvent,
  context: InboxContext,
) => Promise<void>;

export interface Subscriber<Client = unknown> {
  /** The inbox consumer name, e.g. `billing`. */
  consumer: string;
  /** Topics it receives. Default: all. */
  topics?: readonly string[];
  handler: EventHandler<Client>;
}

export interface InDatabasePublisherOptions<Client = unknown> {
  inbox: Inbox<Client>;
  subscribers: readonly Subscriber<Client>[];
  /**
   * Events delivered at once (each in its own transaction; events of one key are never in the same
   * wave). Keep it below the pool size. Default 4.
   */
  concurrency?: number;
  /** Whether a handler's error may succeed on a later attempt. Default: unless `error.retryable === false`. */
  retryable?: (error: unknown) => boolean;
}

/**
 * An event is published when every subscriber of its topic has processed it (or had already: a
 * retry after a partial failure runs only the subscribers that did not commit).
 *
 * @example
 * const publisher = createInDatabasePublisher({
 *   inbox,
 *   subscribers: [{ consumer: 'billing', topics: ['orders'], handler: async (tx, event) => { ... } }],
 * });
 */
export class InDatabasePublisher<Client = unknown> implements Publisher {
  readonly name = 'in-database';

  constructor(private readonly options: InDatabasePublisherOptions<Client>) {}

  async publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<readonly PublishResult[]> {
    const results: PublishResult[] = new Array<PublishResult>(events.length);
    let next = 0;
    const worker = async () => {
      while (next < events.length && !signal.aborted) {
        const index = next++;
        results[index] = await this.deliver(events[index]!);
      }
    };
    const concurrency = Math.max(1, this.options.concurrency ?? 4);
    await Promise.all(Array.from({ length: Math.min(concurrency, events.length) }, worker));
    if (signal.aborted) throw signal.reason;
    return results;
  }

  private async deliver(event: OutboxEvent): Promise<PublishResult> {
    let failure: unknown;
    for (const subscriber of this.options.subscribers) {
      if (subscriber.topics && !subscriber.topics.includes(event.topic)) continue;
      try {
        await this.options.inbox.handle(
          // The event's tenant: the inbox record lives beside the tenant's other rows.
          {
            consumer: subscriber.consumer,
            messageId: event.id,
            ...(event.tenant === undefined ? {} : { tenant: event.tenant }),
            // The producer's intent and trace, as a broker's consumer would read them.
            headers: event.headers,
          },
          (tx, context) => subscriber.handler(tx, event, context),
        );
      } catch (error) {
        // Keep delivering to the other subscribers; the retry skips those that committed.
        failure ??= error;
      }
    }
    if (failure === undefined) return { id: event.id, ok: true };
    const retryable =
      this.options.retryable ?? ((e: unknown) => (e as { retryable?: unknown })?.retryable !== false);
    return { id: event.id, ok: false, error: failure, retryable: retryable(failure) };
  }
}

export function createInDatabasePublisher<Client>(
  options: InDatabasePublisherOptions<Client>,
): InDatabasePublisher<Client> {
  return new InDatabasePublisher(options);
}
