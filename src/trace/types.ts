/**
 * An intent's timeline: the JSON shape of `idem trace --json` and of `createTrace`'s answers
 * (docs/trace.md). Stable: fields are only ever added; `version` changes if one changes meaning.
 * Times are ISO 8601 strings (UTC) from the clock of the process that wrote each record, or null.
 */

/** An intent by its names. */
export interface TracedIntent {
  tenant: string;
  operation: string;
  key: string;
  /** Its reference, as records and message headers name it (`idem-intent`). */
  ref: string;
}

/** The request: the intent's own row (`requests`). */
export interface RequestItem {
  kind: 'request';
  at: string | null;
  state: string;
  completedAt: string | null;
  /** Takeovers raise it: 1 means one holder ran it. */
  fence: number;
  recoveryPoint: string | null;
  error: string | null;
  /** The intent it was started in (a consumer's or a task's), or null. */
  causedBy: string | null;
  traceparent: string | null;
  /** Replays are not recorded by idem (they write nothing): always null, kept for the shape. */
  replays: null;
}

/** A step or call of the intent (`steps`). */
export interface StepItem {
  kind: 'step';
  at: string | null;
  name: string;
  stepKind: 'local' | 'call';
  /** The key it sent downstream. Null for rows written before migration 0011. */
  derivedKey: string | null;
  completedAt: string | null;
  /** Whether its result is recorded (a call without one was started and may have had its effect). */
  recorded: boolean;
  /** The fence of the holder that recorded it: above 1 after a takeover (a retried call). */
  fence: number;
  traceparent: string | null;
}

/** An event added on behalf of the intent (`outbox`). */
export interface OutboxItem {
  kind: 'outbox';
  at: string | null;
  id: string;
  tenant: string;
  /** Where it is published: the exchange, subject or subscription. */
  topic: string;
  orderingKey: string;
  type: string;
  publishedAt: string | null;
  /** Failed publish attempts. */
  attempts: number;
  lastError: string | null;
  /** Set when it was dead-lettered (parked). */
  deadAt: string | null;
  traceparent: string | null;
}

/** A consumer's inbox record of a message the intent caused, in any process. */
export interface ConsumptionItem {
  kind: 'consumption';
  at: string | null;
  tenant: string;
  consumer: string;
  messageId: string;
  state: string;
  attempts: number;
  duplicates: number;
  lastError: string | null;
  traceparent: string | null;
}

/** A task enqueued on behalf of the intent (`tasks`). */
export interface TaskItem {
  kind: 'task';
  at: string | null;
  tenant: string;
  id: string;
  queue: string;
  key: string;
  state: string;
  /** Claims so far. */
  attempts: number;
  maxAttempts: number;
  lastError: string | null;
  finishedAt: string | null;
  traceparent: string | null;
}

/** A saga started on behalf of the intent, or the saga that is the intent. */
export interface SagaItem {
  kind: 'saga';
  at: string | null;
  tenant: string;
  saga: string;
  key: string;
  status: string;
  finishedAt: string | null;
  traceparent: string | null;
}

/** A step of such a saga. */
export interface SagaStepItem {
  kind: 'saga-step';
  at: string | null;
  saga: string;
  key: string;
  position: number;
  name: string;
  state: string;
  actionKey: string;
  compensationKey: string | null;
  compensationAttempts: number;
  doneAt: string | null;
  compensatedAt: string | null;
}

/** An intent started on behalf of this one (follow it with its own trace). */
export interface CausedIntentItem {
  kind: 'caused-intent';
  at: string | null;
  intent: TracedIntent;
  state: string;
  completedAt: string | null;
  traceparent: string | null;
}

/** One delivery (to one endpoint) of a webhook message the intent enqueued (migration 0012). */
export interface WebhookSentItem {
  kind: 'webhook-sent';
  /** When the message was enqueued. */
  at: string | null;
  tenant: string;
  /** The `webhook-id` of every attempt: a receiver's delivery id. */
  messageId: string;
  type: string;
  endpointId: string;
  state: string;
  attempts: number;
  /** The HTTP status of the last answer, or null. */
  lastStatus: number | null;
  lastError: string | null;
  deliveredAt: string | null;
  traceparent: string | null;
}

/** One HTTP attempt of such a delivery, and its answer. */
export interface WebhookAttemptItem {
  kind: 'webhook-attempt';
  at: string | null;
  tenant: string;
  messageId: string;
  endpointId: string;
  /** 1 for the first. */
  attempt: number;
  /** The HTTP status, or null when no answer came. */
  status: number | null;
  /** `delivered`, `retry`, `failed` or `gone`. */
  outcome: string;
  latencyMs: number;
  error: string | null;
}

/** A webhook receipt: one whose handler started or acted for the intent, or one of a delivery it sent. */
export interface WebhookReceivedItem {
  kind: 'webhook-received';
  at: string | null;
  tenant: string;
  source: string;
  deliveryId: string;
  type: string | null;
  /**
   * `caused`: its handler started the intent; `acted-for`: its handler acted on the intent's behalf
   * (`onBehalfOf`, e.g. a provider's refund of the intent's charge); `sent`: the intent sent it
   * (`idem-intent`).
   */
  relation: 'caused' | 'acted-for' | 'sent';
  state: string;
  attempts: number;
  lastError: string | null;
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
  version: 1;
  intent: TracedIntent;
  lookup: TraceLookup;
  /**
   * The request first (it caused the rest), then every other record by its time; records of one
   * time keep the order request, step, outbox, task, saga, saga-step, consumption, caused-intent.
   */
  items: TimelineItem[];
}
