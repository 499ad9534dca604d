/**
 * An intent's timeline: the JSON shape of `idem trace --json` and of `createTrace`'s answers
 * (docs/trace.md). Stable: fields are only ever added; `version` changes if one changes meaning.
 * Times are ISO 8601 strings (UTC) from the clock of the process that wrote each record, or null.
 */

/** An intent by its names. */
export interface TracedIntent {
  /** The tenant the intent ran for. */
  tenant: string;
  /** The operation's name. */
  operation: string;
  /** The idempotency key. */
  key: string;
  /** Its reference, as records and message headers name it (`idem-intent`). */
  ref: string;
}

/** The request: the intent's own row (`requests`). */
export interface RequestItem {
  /** What the item is. */
  kind: 'request';
  /** When it was claimed or, recorded at commit, first written. */
  at: string | null;
  /** `pending`, `completed` or `failed`. */
  state: string;
  /** When it ended, or null. */
  completedAt: string | null;
  /** Takeovers raise it: 1 means one holder ran it. */
  fence: number;
  /** Where a resumed run goes on from (a multi-step operation's last recorded step), or null. */
  recoveryPoint: string | null;
  /** Why it failed, or null. */
  error: string | null;
  /** The intent it was started in (a consumer's or a task's), or null. */
  causedBy: string | null;
  /** The W3C `traceparent` it was written in, or null outside any trace. */
  traceparent: string | null;
  /** Replays are not recorded by idem (they write nothing): always null, kept for the shape. */
  replays: null;
}

/** A step or call of the intent (`steps`). */
export interface StepItem {
  /** What the item is. */
  kind: 'step';
  /** When it started (else when it completed). */
  at: string | null;
  /** The step's or call's name. */
  name: string;
  /** `local` (a step in a transaction) or `call` (work outside one, under a derived key). */
  stepKind: 'local' | 'call';
  /** The key it sent downstream. Null for rows written before migration 0011. */
  derivedKey: string | null;
  /** When its result was recorded, or null. */
  completedAt: string | null;
  /** Whether its result is recorded (a call without one was started and may have had its effect). */
  recorded: boolean;
  /** The fence of the holder that recorded it: above 1 after a takeover (a retried call). */
  fence: number;
  /** The W3C `traceparent` it was written in, or null outside any trace. */
  traceparent: string | null;
}

/** An event added on behalf of the intent (`outbox`). */
export interface OutboxItem {
  /** What the item is. */
  kind: 'outbox';
  /** When it was written (committed with the intent's writes). */
  at: string | null;
  /** The event's id: the message id consumers see. */
  id: string;
  /** The tenant of the record. */
  tenant: string;
  /** Where it is published: the exchange, subject or subscription. */
  topic: string;
  /** The key events are published in order by. */
  orderingKey: string;
  /** The event's type. */
  type: string;
  /** When the broker confirmed it, or null. */
  publishedAt: string | null;
  /** Failed publish attempts. */
  attempts: number;
  /** The last failure's message, or null. */
  lastError: string | null;
  /** Set when it was dead-lettered (parked). */
  deadAt: string | null;
  /** The W3C `traceparent` it was written in, or null outside any trace. */
  traceparent: string | null;
}

/** A consumer's inbox record of a message the intent caused, in any process. */
export interface ConsumptionItem {
  /** What the item is. */
  kind: 'consumption';
  /** When the consumer processed it (or dead-lettered it). */
  at: string | null;
  /** The tenant of the record. */
  tenant: string;
  /** The consumer's name. */
  consumer: string;
  /** The message id it was recorded under. */
  messageId: string;
  /** `processed` or `dead`. */
  state: string;
  /** Times the handler was tried. */
  attempts: number;
  /** Redeliveries dropped as duplicates. */
  duplicates: number;
  /** The last failure's message, or null. */
  lastError: string | null;
  /** The W3C `traceparent` it was written in, or null outside any trace. */
  traceparent: string | null;
}

/** A task enqueued on behalf of the intent (`tasks`). */
export interface TaskItem {
  /** What the item is. */
  kind: 'task';
  /** When it was enqueued. */
  at: string | null;
  /** The tenant of the record. */
  tenant: string;
  /** The task's id. */
  id: string;
  /** Its queue. */
  queue: string;
  /** Its dedupe key. */
  key: string;
  /** `ready`, `claimed`, `completed` or `dead`. */
  state: string;
  /** Claims so far. */
  attempts: number;
  /** Claims allowed before it is dead. */
  maxAttempts: number;
  /** The last failure's message, or null. */
  lastError: string | null;
  /** When it completed or died, or null. */
  finishedAt: string | null;
  /** The W3C `traceparent` it was written in, or null outside any trace. */
  traceparent: string | null;
}

/** A saga started on behalf of the intent, or the saga that is the intent. */
export interface SagaItem {
  /** What the item is. */
  kind: 'saga';
  /** When it was started. */
  at: string | null;
  /** The tenant of the record. */
  tenant: string;
  /** The saga's name. */
  saga: string;
  /** The saga instance's key. */
  key: string;
  /** `running`, `compensating`, `completed`, `compensated` or `stuck`. */
  status: string;
  /** When it ended, or null. */
  finishedAt: string | null;
  /** The W3C `traceparent` it was written in, or null outside any trace. */
  traceparent: string | null;
}

/** A step of such a saga. */
export interface SagaStepItem {
  /** What the item is. */
  kind: 'saga-step';
  /** When the step was registered. */
  at: string | null;
  /** The saga's name. */
  saga: string;
  /** The saga instance's key. */
  key: string;
  /** Its place in the saga, from 0. */
  position: number;
  /** The step's name. */
  name: string;
  /** `registered`, `done` or `compensated`. */
  state: string;
  /** The derived key its action sent downstream. */
  actionKey: string;
  /** The derived key its compensation sends, or null. */
  compensationKey: string | null;
  /** Times its compensation was tried. */
  compensationAttempts: number;
  /** When its action was recorded done, or null. */
  doneAt: string | null;
  /** When its compensation was recorded, or null. */
  compensatedAt: string | null;
}

/** An intent started on behalf of this one (follow it with its own trace). */
export interface CausedIntentItem {
  /** What the item is. */
  kind: 'caused-intent';
  /** When the caused intent was claimed or first written. */
  at: string | null;
  /** The caused intent, by its names. */
  intent: TracedIntent;
  /** `pending`, `completed` or `failed`. */
  state: string;
  /** When it ended, or null. */
  completedAt: string | null;
  /** The W3C `traceparent` it was written in, or null outside any trace. */
  traceparent: string | null;
}

/** One delivery (to one endpoint) of a webhook message the intent enqueued (migration 0012). */
export interface WebhookSentItem {
  /** What the item is. */
  kind: 'webhook-sent';
  /** When the message was enqueued. */
  at: string | null;
  /** The tenant of the record. */
  tenant: string;
  /** The `webhook-id` of every attempt: a receiver's delivery id. */
  messageId: string;
  /** The event type. */
  type: string;
  /** The endpoint it is delivered to. */
  endpointId: string;
  /** `pending`, `delivering`, `delivered`, `failed` or `cancelled`. */
  state: string;
  /** HTTP attempts so far. */
  attempts: number;
  /** The HTTP status of the last answer, or null. */
  lastStatus: number | null;
  /** The last failure's message, or null. */
  lastError: string | null;
  /** When an attempt was answered 2xx, or null. */
  deliveredAt: string | null;
  /** The W3C `traceparent` it was written in, or null outside any trace. */
  traceparent: string | null;
}

/** One HTTP attempt of such a delivery, and its answer. */
export interface WebhookAttemptItem {
  /** What the item is. */
  kind: 'webhook-attempt';
  /** When the attempt started. */
  at: string | null;
  /** The tenant of the record. */
  tenant: string;
  /** The message (the `webhook-id` sent). */
  messageId: string;
  /** The endpoint it went to. */
  endpointId: string;
  /** 1 for the first. */
  attempt: number;
  /** The HTTP status, or null when no answer came. */
  status: number | null;
  /** `delivered`, `retry`, `failed` or `gone`. */
  outcome: string;
  /** How long the answer took, in milliseconds. */
  latencyMs: number;
  /** Why no answer came (a timeout, a reset), or null. */
  error: string | null;
}

/** A webhook receipt: one whose handler started or acted for the intent, or one of a delivery it sent. */
export interface WebhookReceivedItem {
  /** What the item is. */
  kind: 'webhook-received';
  /** When it was received. */
  at: string | null;
  /** The tenant of the record. */
  tenant: string;
  /** The sender it was received from. */
  source: string;
  /** The delivery id it arrived under (its `webhook-id`). */
  deliveryId: string;
  /** The event type, or null when the receiver could not tell. */
  type: string | null;
  /**
   * `caused`: its handler started the intent; `acted-for`: its handler acted on the intent's behalf
   * (`onBehalfOf`, e.g. a provider's refund of the intent's charge); `sent`: the intent sent it
   * (`idem-intent`).
   */
  relation: 'caused' | 'acted-for' | 'sent';
  /** `pending`, `processing`, `applied`, `stale`, `unhandled` or `dead`. */
  state: string;
  /** Times its handler was tried. */
  attempts: number;
  /** The last failure's message, or null. */
  lastError: string | null;
  /** When its handler's outcome was recorded, or null. */
  processedAt: string | null;
  /** The intent its `idem-intent` header named (an idem sender's), or null. */
  senderIntent: string | null;
  /** The `traceparent` it arrived with, or null. */
  traceparent: string | null;
}

export type TimelineItem =
  | RequestItem
  | StepItem
  | OutboxItem
  | ConsumptionItem
  | TaskItem
  | SagaItem
  | SagaStepItem
  | CausedIntentItem
  | WebhookSentItem
  | WebhookAttemptItem
  | WebhookReceivedItem;

/**
 * How the intent was found. `delivery`: a webhook delivery id, received from `source` or (without
 * one) sent; `intents` lists every intent the delivery named, the traced one first.
 */
export type TraceLookup =
  | { by: 'intent' }
  | { by: 'message'; value: string }
  | { by: 'derived-key'; value: string }
  | { by: 'delivery'; value: string; source?: string; intents?: string[] };

/** One intent's timeline, in causal order. */
export interface Timeline {
  /** The shape's version: changes only if a field changes meaning. */
  version: 1;
  /** The intent the timeline is of. */
  intent: TracedIntent;
  /** How it was found. */
  lookup: TraceLookup;
  /**
   * The request first (it caused the rest), then every other record by its time; records of one
   * time keep the order request, step, outbox, task, saga, saga-step, consumption, caused-intent.
   */
  items: TimelineItem[];
}
