/**
 * The claim loop: due receipts are claimed with `FOR UPDATE SKIP LOCKED` (of every tenant, or
 * tenant by tenant), and each is processed on its own: its entity declared and the event
 * validated before any lock, then handled in one transaction that also records its entity's
 * version and its state. A failure retries with backoff until a dead letter; an invalid event is a
 * dead letter at once.
 */
import { receiptRef } from '../core/causation.js';
import { toMillis } from '../core/clock.js';
import { parseJsonColumn } from '../core/json-column.js';
import { runInCause } from '../observability/caused-span.js';
import { errorMessage } from './error-message.js';
import { isInvalidWebhookEvent } from './errors.js';
import { createEvent } from './event.js';
import { declaredEntity, type DeclaredEntity } from './handlers.js';
import { finishReceipt, handleInOrder, type OrderedOutcome } from './ordering.js';
import type { ParkedGap, ProcessOutcome, WebhookReceiptRef } from './outcomes.js';
import type { ProcessorContext } from './processor-context.js';
import type { ClaimedRow } from './receipt-rows.js';

/**
 * Claims up to `limit` due receipts. With `tenants`, claims tenant by tenant (each claim pinned to
 * one) until `limit` is reached, starting at the tenant of `turn` so each gets its turn.
 */
export async function claimReceipts<Client>(
  processor: ProcessorContext<Client>,
  limit: number,
  turn: number,
): Promise<ClaimedRow[]> {
  const { statements, sql, clock } = processor;
  const { tenants, leaseMs } = processor.options;
  const now = clock.now();
  const claim = { now: new Date(now), limit, leaseUntil: new Date(now + leaseMs) };
  if (!tenants) return statements.claim(sql, claim);
  const claimed: ClaimedRow[] = [];
  const start = turn % tenants.length;
  for (let i = 0; i < tenants.length && claimed.length < limit; i++) {
    const tenant = tenants[(start + i) % tenants.length]!;
    claimed.push(...(await statements.claimTenant(sql, { ...claim, limit: limit - claimed.length, tenant })));
  }
  return claimed;
}

/** Processes one claimed receipt to its outcome, and reports it. */
export async function processReceipt<Client>(
  processor: ProcessorContext<Client>,
  row: ClaimedRow,
): Promise<ProcessOutcome> {
  const attempt = row.attempts - row.deferrals;
  const event = createEvent({
    tenant: row.tenant_id,
    source: row.source,
    deliveryId: row.delivery_id,
    type: row.event_type,
    headers: parseJsonColumn(row.headers) as Record<string, string>,
    body: row.body,
    receivedAt: toMillis(row.received_at)!,
    attempt,
  });
  const fields: WebhookReceiptRef = {
    tenant: row.tenant_id,
    source: row.source,
    deliveryId: row.delivery_id,
    eventType: row.event_type,
    attempt,
  };
  if (attempt > processor.options.maxAttempts) {
    // Only after crashes: each claim counted an attempt that never reported back.
    const message = 'attempts exhausted: the workers that claimed this receipt never finished';
    await recordFailure(processor, row, true, message);
    processor.events.emit('webhook:dead', { ...fields, error: message, invalid: false });
    return 'dead';
  }
  const handler = processor.handlerFor(row.source, row.event_type);

  // What the event is about, and whether it may take effect at all: checked before any lock.
  let entity: DeclaredEntity | null = null;
  if (handler) {
    try {
      entity = declaredEntity(handler, event, row.source);
    } catch (error) {
      // A body that does not parse, or a version that cannot be ordered: invalid, not retried.
      const reason = error instanceof Error ? error.message : String(error);
      return refuse(processor, row, null, reason.slice(0, 2000), fields);
    }
    let refusal: string | null | undefined;
    try {
      refusal = await handler.validate?.(event);
    } catch (error) {
      return failed(processor, row, error, fields);
    }
    if (refusal) return refuse(processor, row, entity, refusal, fields);
  }

  try {
    const { statements } = processor;
    if (entity) {
      await statements.ensureEntity(processor.sql, {
        tenant: row.tenant_id,
        scope: entity.scope,
        key: entity.key,
        ordering: entity.ordering,
      });
    }
    // The handler runs on behalf of the receipt (the operations it starts name it as their cause),
    // in a child span of the trace the request arrived with (docs/trace.md).
    const cause = { intent: receiptRef(fields), traceparent: row.traceparent ?? null };
    const attributes = { 'idem.webhook.source': row.source, 'idem.webhook.delivery_id': row.delivery_id };
    const work = () =>
      processor.sql.transaction(async (tx): Promise<OrderedOutcome> => {
        if ((await statements.lock(tx, row)) === 0) return { outcome: 'lost' };
        if (!handler) {
          await finishReceipt(processor, tx, row, 'unhandled', null);
          return { outcome: 'unhandled' };
        }
        if (!entity) {
          await handler.handle(tx, event);
          await finishReceipt(processor, tx, row, 'applied', null);
          return { outcome: 'applied' };
        }
        return handleInOrder(processor, tx, row, event, handler, entity);
      });
    // The first intent the handler acts for (`onBehalfOf`) is recorded on the receipt as it finishes.
    const done = await runInCause('idem.webhooks.handle', cause, attributes, work, { ref: null });
    if ((done.woken ?? 0) > 0) processor.notify();
    settled(processor, fields, entity, done.outcome, done.parked);
    return done.outcome;
  } catch (error) {
    if (isInvalidWebhookEvent(error)) return refuse(processor, row, entity, error.reason, fields);
    return failed(processor, row, error, fields);
  }
}

/** Reports a receipt that ended without a failure, once its transaction committed. */
function settled<Client>(
  processor: ProcessorContext<Client>,
  fields: WebhookReceiptRef,
  entity: DeclaredEntity | null,
  outcome: ProcessOutcome,
  parked: ParkedGap | undefined,
): void {
  const { events } = processor;
  const about = entity && { scope: entity.scope, key: entity.key, version: entity.version };
  if (outcome === 'superseded' && about) events.emit('webhook:superseded', { ...fields, entity: about });
  else if (parked && about) events.emit('webhook:parked', { ...fields, entity: about, ...parked });
  else if (outcome !== 'superseded' && outcome !== 'invalid' && outcome !== 'retry' && outcome !== 'dead')
    events.emit('webhook:processed', { ...fields, outcome });
}

/** An invalid event: dead at once with the reason, nothing of it applied. */
async function refuse<Client>(
  processor: ProcessorContext<Client>,
  row: ClaimedRow,
  entity: DeclaredEntity | null,
  reason: string,
  fields: WebhookReceiptRef,
): Promise<ProcessOutcome> {
  const message = `invalid event: ${reason}`;
  await processor.statements.reject(processor.sql, {
    receipt: row,
    now: new Date(processor.clock.now()),
    error: message,
    entity,
  });
  processor.events.emit('webhook:dead', { ...fields, error: message, invalid: true });
  return 'invalid';
}

/** The handler (or the database) failed: retry with backoff, or dead. */
async function failed<Client>(
  processor: ProcessorContext<Client>,
  row: ClaimedRow,
  error: unknown,
  fields: WebhookReceiptRef,
): Promise<ProcessOutcome> {
  const permanent = (error as { retryable?: unknown } | null)?.retryable === false;
  const dead = permanent || row.attempts - row.deferrals >= processor.options.maxAttempts;
  const message = errorMessage(error);
  const nextAttemptAt = await recordFailure(processor, row, dead, message);
  if (dead) processor.events.emit('webhook:dead', { ...fields, error: message, invalid: false });
  else processor.events.emit('webhook:retried', { ...fields, error: message, nextAttemptAt });
  return dead ? 'dead' : 'retry';
}

/** Records the failure; returns when the receipt is due again (now, for a dead one). */
async function recordFailure<Client>(
  processor: ProcessorContext<Client>,
  row: ClaimedRow,
  dead: boolean,
  message: string,
): Promise<number> {
  const now = processor.clock.now();
  const due = dead ? now : now + processor.options.delay(row.attempts - row.deferrals);
  await processor.statements.fail(processor.sql, {
    receipt: row,
    state: dead ? 'dead' : 'pending',
    due: new Date(due),
    error: message,
  });
  return due;
}
