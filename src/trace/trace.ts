/**
 * "What happened to order 1001?": one intent's timeline across every module (the request, its
 * steps and calls, the events it published, the consumers that handled them in other processes,
 * its tasks and sagas, the intents it caused), read from the causation every record carries
 * (migration 0011, core/causation.ts). `idem trace` prints it; the console shows the same.
 */
import { intentRef, parseIntentRef } from '../core/causation.js';
import { InvalidArgumentError, type OperationScope } from '../core/errors.js';
import { validateKey, validateName } from '../core/keys.js';
import { defaultSchema } from '../core/schema-name.js';
import type { Queryable } from '../core/sql.js';
import { validateTenant } from '../core/tenant.js';
import {
  causalOrder,
  causedIntentItem,
  consumptionItem,
  outboxItem,
  requestItem,
  sagaItem,
  sagaStepItem,
  stepItem,
  taskItem,
} from './items.js';
import { renderTraceStatements, type TraceStatements } from './statements.js';
import {
  deliveryIntents,
  renderWebhookTraceStatements,
  webhookItems,
  type WebhookTraceStatements,
} from './webhooks.js';
import type { Timeline, TimelineItem, TraceLookup } from './types.js';

/** Options of `createTrace`. */
export interface TraceOptions {
  /** Where idem's tables are (any `Sql` or `Queryable`). */
  sql: Queryable;
  /** The schema of idem's tables. Default `idem`. */
  schema?: string;
}

/**
 * A reverse lookup: from an id some record keeps to the intent that caused it. Each is one
 * statement; `delivery` (webhooks.ts) is beside them, as it may name several intents.
 */
type ReverseLookup = (
  statements: TraceStatements,
  db: Queryable,
  value: string,
  tenant: string | null,
) => Promise<OperationScope | null>;

const reverseLookups: Record<'message' | 'derived-key', ReverseLookup> = {
  message: async (statements, db, id, tenant) => {
    const row = await statements.messageIntent(db, { id, tenant });
    return row ? parseIntentRef(row.intent) : null;
  },
  'derived-key': async (statements, db, key) => {
    const row = await statements.derivedKeyIntent(db, { key });
    if (!row) return null;
    // A saga's step: the intent that started the saga, or the saga itself.
    if (typeof row.intent === 'string') return parseIntentRef(row.intent);
    return {
      tenant: String(row.tenant_id),
      operation: String(row.operation),
      key: String(row.idempotency_key),
    };
  },
};

/** Reads intents' timelines. Made by `createTrace`. */
export interface Trace {
  /** The timeline of the intent (tenant, operation, key), or null when no record names it. */
  intent(scope: OperationScope): Promise<Timeline | null>;
  /**
   * The timeline of the intent that caused a message: an outbox event's id, or the id an inbox
   * record keeps. `tenant` makes it a primary-key lookup; without it every tenant's rows are
   * searched (a scan: for tools). Null when no record of the id names an intent.
   */
  message(id: string, options?: { tenant?: string }): Promise<Timeline | null>;
  /** The timeline of the intent whose step, call or saga step sent the derived key `key`. */
  derivedKey(key: string): Promise<Timeline | null>;
  /**
   * The timeline of the intent a webhook delivery names. With `source`, a received delivery (its
   * receipt's delivery id): the first intent its handler started, else the intent of the idem
   * sender that sent it (`idem-intent`). Without, a sent delivery (its `webhook-id`, the message
   * id): the intent that enqueued it. `tenant` narrows the lookup to one tenant's rows.
   * `lookup.intents` lists every intent the delivery named. Null when it names none.
   */
  delivery(deliveryId: string, options?: { source?: string; tenant?: string }): Promise<Timeline | null>;
}

/**
 * Creates a reader of intents' timelines. Starts nothing; each answer is a few indexed reads.
 *
 * @example
 * const trace = createTrace({ sql: fromPg(pool) });
 * const timeline = await trace.intent({ tenant: 'acme', operation: 'create-payment', key: 'order-1001' });
 * for (const item of timeline?.items ?? []) console.log(item.kind, item.at);
 */
export function createTrace(options: TraceOptions): Trace {
  const statements = renderTraceStatements(options.schema ?? defaultSchema);
  const webhooks = renderWebhookTraceStatements(options.schema ?? defaultSchema);
  const db = options.sql;
  const timelineOf = (scope: OperationScope, lookup: TraceLookup) =>
    readTimeline(statements, webhooks, db, scope, lookup);
  const reverse = async (by: keyof typeof reverseLookups, value: string, tenant: string | null) => {
    const scope = await reverseLookups[by](statements, db, value, tenant);
    return scope ? timelineOf(scope, { by, value }) : null;
  };
  return {
    intent: (scope) => {
      validateTenant(scope.tenant);
      validateName('operation', scope.operation);
      validateKey(scope.key);
      return timelineOf(scope, { by: 'intent' });
    },
    message: (id, { tenant } = {}) => {
      if (tenant !== undefined) validateTenant(tenant);
      if (typeof id !== 'string' || id.length === 0 || id.length > 512) {
        throw new InvalidArgumentError('a message id must be 1–512 characters');
      }
      return reverse('message', id, tenant ?? null);
    },
    derivedKey: (key) => {
      validateKey(key);
      return reverse('derived-key', key, null);
    },
    delivery: async (deliveryId, { source, tenant } = {}) => {
      if (tenant !== undefined) validateTenant(tenant);
      if (source !== undefined) validateName('source', source);
      if (typeof deliveryId !== 'string' || deliveryId.length === 0 || deliveryId.length > 512) {
        throw new InvalidArgumentError('a delivery id must be 1–512 characters');
      }
      const query = { deliveryId, source: source ?? null, tenant: tenant ?? null };
      const intents = await deliveryIntents(webhooks, db, query);
      const first = intents[0];
      if (!first) return null;
      return timelineOf(first, {
        by: 'delivery',
        value: deliveryId,
        ...(source === undefined ? {} : { source }),
        intents: [...new Set(intents.map(intentRef))],
      });
    },
  };
}

async function readTimeline(
  statements: TraceStatements,
  webhooks: WebhookTraceStatements,
  db: Queryable,
  scope: OperationScope,
  lookup: TraceLookup,
): Promise<Timeline | null> {
  const ref = intentRef(scope);
  const input = { scope, ref };
  const request = await statements.request(db, input);
  const causedBy = typeof request?.caused_by === 'string' ? request.caused_by : null;
  const [steps, outbox, inbox, tasks, sagas, caused, sentAndReceived] = await Promise.all([
    statements.steps(db, input),
    statements.outbox(db, input),
    statements.inbox(db, input),
    statements.tasks(db, input),
    statements.sagas(db, input),
    statements.caused(db, input),
    webhookItems(webhooks, db, input, causedBy),
  ]);
  const items: TimelineItem[] = [
    ...(request ? [requestItem(request)] : []),
    ...steps.map(stepItem),
    ...outbox.map(outboxItem),
    ...inbox.map(consumptionItem),
    ...tasks.map(taskItem),
    ...caused.map(causedIntentItem),
    ...sentAndReceived,
  ];
  for (const row of sagas) {
    items.push(sagaItem(row));
    const saga = { tenant: String(row.tenant_id), saga: String(row.saga), key: String(row.saga_key) };
    for (const step of await statements.sagaSteps(db, saga)) items.push(sagaStepItem(saga, step));
  }
  if (items.length === 0) return null;
  return { version: 1, intent: { ...scope, ref }, lookup, items: causalOrder(items) };
}
