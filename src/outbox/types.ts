/**
 * The contract between the outbox dispatcher and a publisher (RabbitMQ, NATS JetStream, the
 * in-database transport, signed webhooks, or your own). A publisher only has to deliver a batch and
 * say, per event, whether it was accepted; ordering, retries, backoff and parking are the
 * dispatcher's job.
 */

/** A JSON value: what an event's payload is stored as (a `jsonb` column). */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** One event as the dispatcher hands it to a publisher. */
export interface OutboxEvent<Payload = unknown> {
  /**
   * UUIDv7, assigned when the event was added (time-ordered). Every publisher carries it (AMQP
   * `message_id`, `Nats-Msg-Id`, `webhook-id`), and it is the same on every retry, so downstream
   * inboxes dedupe on it.
   */
  readonly id: string;
  /**
   * The tenant the event belongs to (`''`, the default tenant, unless the producer named one). The
   * dispatcher sets it on every event; it is optional only so that events built by hand (tests of
   * a publisher) need not name it, which means the default tenant.
   */
  readonly tenant?: string;
  /** Where the event goes: an exchange, a subject, a webhook subscription. Debezium: `aggregatetype`. */
  readonly topic: string;
  /**
   * The ordering key, usually the aggregate id. Events of one key (and tenant) are published in the
   * order they were added, never an event before an earlier one of its key. Debezium: `aggregateid`.
   */
  readonly key: string;
  /** The event's type, e.g. `order.created`. */
  readonly type: string;
  /** The JSON payload as the producer wrote it (stored as `jsonb`, so object keys may be reordered). */
  readonly payload: Payload;
  /** Headers the producer set; publishers pass them on as message headers. */
  readonly headers: Readonly<Record<string, string>>;
  /** When the producer's transaction added the event (epoch ms). */
  readonly createdAt: number;
  /** Failed publish attempts before this one (0 on the first). */
  readonly attempts: number;
}

/** The publisher accepted the event: the broker confirmed it, the endpoint answered 2xx. */
export interface PublishSuccess {
  readonly id: string;
  readonly ok: true;
}

/** The event was not accepted. The dispatcher retries it later or parks it as dead. */
export interface PublishFailure {
  readonly id: string;
  readonly ok: false;
  /** What went wrong; its message is stored as the event's `last_error`. */
  readonly error: unknown;
  /**
   * False when retrying cannot help (a 4xx other than 408/429, a message the broker refuses): the
   * event is parked as dead at once. Default true.
   */
  readonly retryable?: boolean;
  /** The earliest time to try again, in ms from now (e.g. from `Retry-After`). Default: the backoff. */
  readonly retryAfterMs?: number;
}

export type PublishResult = PublishSuccess | PublishFailure;

/**
 * Delivers events somewhere. Implement `publish`; the dispatcher does the rest.
 *
 * Contract:
 * - A batch holds at most one event per ordering key, so a publisher may deliver the events of one
 *   batch concurrently and in any order. (The dispatcher sends the next event of a key only after
 *   this one succeeded: that is how per-key order stays strict across failures.)
 * - Resolve with exactly one result per event (matched by `id`). An event without a result counts
 *   as a retryable failure. Rejecting fails the whole batch (retryable).
 * - Success means durably accepted downstream (publisher confirm, PubAck, 2xx), never "written to
 *   a socket". A publisher may deliver an event and still report failure, or crash before
 *   reporting: the event is then delivered again, with the same id. That is at-least-once.
 * - `signal` aborts when the dispatcher gives up on the batch (its publish timeout) or stops.
 */
export interface Publisher {
  /** A short name for logs and metrics, e.g. `rabbitmq`. */
  readonly name?: string;
  publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<readonly PublishResult[]>;
  /** Releases connections the publisher opened itself. */
  close?(): Promise<void>;
}

/** An event as a producer adds it inside its own transaction. */
export interface NewOutboxEvent<Payload = unknown> {
  /** Destination: exchange, subject or subscription name. 1–200 characters. */
  topic: string;
  /** Ordering key, usually the aggregate id. 1–200 characters. */
  key: string;
  /** Event type, e.g. `order.created`. 1–200 characters. */
  type: string;
  /** Any JSON-serialisable value. */
  payload: Payload;
  /** String headers passed on by publishers. Default none. */
  headers?: Record<string, string>;
  /** A UUID to use instead of a fresh UUIDv7, e.g. one derived from an operation's key. */
  id?: string;
  /**
   * The tenant the event belongs to: its row lives with the tenant's other rows (the primary key is
   * (tenant, id)), and ordering keys are per tenant. Default: the outbox's `tenant` option (`''`,
   * the default tenant, unless set).
   */
  tenant?: string;
}
