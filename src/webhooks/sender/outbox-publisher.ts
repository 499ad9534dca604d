/**
 * The outbox's `Publisher` for webhooks. Publishing an event stores it as a webhook message and
 * fans it out to the subscribed endpoints (one statement, durable): that is what "accepted" means
 * here. The `WebhookSender`'s workers then deliver each (message, endpoint) on its own schedule.
 *
 * Why not deliver inside `publish`: the outbox holds an ordering key until its event succeeds, so
 * one slow or dead subscriber would hold every later event of that key for every other subscriber,
 * and the spec's multi-day retry schedule, `Retry-After` and 410 are per endpoint, not per event.
 * The cost: once fanned out, a retried delivery can overtake a later event to the same endpoint;
 * receivers must be order-aware anyway (idem's processor orders each entity's events by version).
 */
import { causationFromHeaders, runCausedBy } from '../../core/causation.js';
import type { OutboxEvent, Publisher, PublishResult } from '../../outbox/types.js';
import type { WebhookMessage, WebhookSender } from './sender.js';

/** Options of `createWebhookPublisher`. */
export interface WebhookPublisherOptions {
  /** The sender that stores and delivers the webhooks (`createWebhookSender`). */
  sender: WebhookSender;
  /**
   * The body of the webhook for an event. Default: the Standard Webhooks payload structure
   * `{ type, timestamp, data }` with the event's type, creation time and payload.
   */
  payload?: (event: OutboxEvent) => WebhookMessage['payload'];
  /** Wake the sender's workers after each batch so delivery starts at once. Default true. */
  notify?: boolean;
}

/**
 * An outbox `Publisher` that hands events to a `WebhookSender`. The outbox event id becomes the
 * `webhook-id`.
 *
 * @example
 * const dispatcher = createOutboxDispatcher({ sql, publisher: createWebhookPublisher({ sender }) });
 */
export function createWebhookPublisher(options: WebhookPublisherOptions): Publisher {
  const { sender } = options;
  const payload =
    options.payload ??
    ((event: OutboxEvent) => ({
      type: event.type,
      timestamp: new Date(event.createdAt).toISOString(),
      data: event.payload,
    }));
  return {
    name: 'webhooks',
    async publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<readonly PublishResult[]> {
      const results: PublishResult[] = [];
      for (const event of events) {
        if (signal.aborted) {
          results.push({ id: event.id, ok: false, error: signal.reason ?? new Error('publish aborted') });
          continue;
        }
        try {
          // The event's cause (its headers name the intent that added it) is the message's.
          await runCausedBy(causationFromHeaders(event.headers), () =>
            sender.enqueue(sender.sql, {
              id: event.id,
              type: event.type,
              payload: payload(event),
              // The event's tenant: delivered to that tenant's endpoints.
              ...(event.tenant === undefined ? {} : { tenant: event.tenant }),
            }),
          );
          results.push({ id: event.id, ok: true });
        } catch (error) {
          results.push({ id: event.id, ok: false, error });
        }
      }
      if (options.notify ?? true) sender.notify();
      return results;
    },
  };
}
