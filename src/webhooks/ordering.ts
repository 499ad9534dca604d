/**
 * The ordering engine: inside a claimed receipt's transaction, its entity's row is locked (SKIP
 * LOCKED: a busy entity makes the receipt wait, not the worker) and the event's version compared
 * with the applied one. `state`: a newer version applies, an older one is superseded, the same one
 * is a duplicate. `sequence`: the next version applies, an earlier one is a duplicate (or a dead
 * letter when an operator skipped it), a later one waits for the gap, then parks its entity.
 */
import { actedForNow } from '../core/causation.js';
import { toMillis } from '../core/clock.js';
import type { Transaction } from '../core/sql.js';
import { InvalidWebhookEventError } from './errors.js';
import type { WebhookEvent } from './event.js';
import type { DeclaredEntity, ResolvedHandler } from './handlers.js';
import type { ParkedGap, ProcessOutcome } from './outcomes.js';
import type { ProcessorContext } from './processor-context.js';
import type { ClaimedRow, LockedEntity, ReceiptEntity } from './receipt-rows.js';

/** What the engine decided, once the transaction commits. */
export interface OrderedOutcome {
  outcome: ProcessOutcome;
  /** Waiting receipts of the entity it made due (the workers are woken for them). */
  woken?: number;
  /** Set when this receipt parked its entity (`webhook:parked` goes out after the commit). */
  parked?: ParkedGap;
}

/** Handles an entity event in its entity's order, in `tx`: applies it, or records why not. */
export async function handleInOrder<Client>(
  processor: ProcessorContext<Client>,
  tx: Transaction<Client>,
  row: ClaimedRow,
  event: WebhookEvent,
  handler: ResolvedHandler<Client>,
  entity: DeclaredEntity,
): Promise<OrderedOutcome> {
  const { statements, clock } = processor;
  const ref = { tenant: row.tenant_id, scope: entity.scope, key: entity.key };
  const current = await statements.lockEntity(tx, {
    ...ref,
    version: entity.version,
    firstVersion: handler.firstVersion,
  });
  if (!current) {
    // Another worker is handling this entity: wait for it, without holding this worker.
    const retryMs = processor.options.entityBusyRetryMs * (0.5 + processor.options.random() / 2);
    await wait(processor, tx, row, entity, new Date(clock.now() + retryMs), row.waiting_since);
    return { outcome: 'deferred' };
  }
  if (current.ordering !== entity.ordering) {
    throw new InvalidWebhookEventError(
      `entity ${entity.scope}/${entity.key} is ordered by ${current.ordering}; this event type declares ${entity.ordering}`,
    );
  }
  const apply = async (wakeThrough: string | null): Promise<OrderedOutcome> => {
    await handler.handle(tx, event);
    // After the handler, just before COMMIT: see ensureEntity for why the write comes last.
    const woken = await statements.applyVersion(tx, {
      entity: { ...ref, version: entity.version },
      source: row.source,
      deliveryId: row.delivery_id,
      now: new Date(clock.now()),
      wakeThrough,
    });
    await finishReceipt(processor, tx, row, 'applied', entity);
    return { outcome: 'applied', woken };
  };
  if (entity.ordering === 'state') {
    if (current.versus_applied === null || current.versus_applied > 0) return apply(null);
    const outcome = current.versus_applied < 0 ? 'superseded' : 'duplicate';
    await finishReceipt(processor, tx, row, outcome, entity);
    return { outcome };
  }
  if (current.versus_expected === 0) return apply((BigInt(entity.version) + 1n).toString());
  if (current.versus_expected! < 0) {
    const skipped = await statements.skipCovering(tx, { ...ref, version: entity.version });
    if (skipped) {
      throw new InvalidWebhookEventError(
        `version ${entity.version} of ${entity.scope}/${entity.key} arrived after an operator skipped versions ${skipped.from_version}–${skipped.through_version} at ${new Date(toMillis(skipped.skipped_at)!).toISOString()}${skipped.reason ? ` (${skipped.reason})` : ''}: never applied`,
      );
    }
    if (current.version === null) {
      throw new InvalidWebhookEventError(
        `version ${entity.version} of ${entity.scope}/${entity.key} is below the handler's first version ${handler.firstVersion}`,
      );
    }
    await finishReceipt(processor, tx, row, 'duplicate', entity);
    return { outcome: 'duplicate' };
  }
  return awaitGap(processor, tx, row, entity, current, handler);
}

/**
 * A sequence event ahead of the next expected version: it waits until the gap's deadline (or
 * until the missing version wakes it); past the deadline the entity parks and every later
 * version waits, not scheduled, until the gap is filled or skipped.
 */
async function awaitGap<Client>(
  processor: ProcessorContext<Client>,
  tx: Transaction<Client>,
  row: ClaimedRow,
  entity: DeclaredEntity,
  current: LockedEntity,
  handler: ResolvedHandler<Client>,
): Promise<OrderedOutcome> {
  const now = processor.clock.now();
  const waitingSince = toMillis(row.waiting_since) ?? now;
  const progressedAt = toMillis(current.applied_at) ?? waitingSince;
  const timeoutMs = handler.gapTimeoutMs ?? processor.options.gapTimeoutMs;
  const deadline = Math.max(waitingSince, progressedAt) + timeoutMs;
  if (current.parked_at === null && now < deadline) {
    await wait(processor, tx, row, entity, new Date(deadline), new Date(waitingSince));
    return { outcome: 'waiting' };
  }
  let parked: ParkedGap | undefined;
  if (current.parked_at === null) {
    const reason = `version ${current.expected} has not arrived; version ${entity.version} (delivery ${row.delivery_id}) waited ${Math.round((now - Math.max(waitingSince, progressedAt)) / 1000)} s for it (gap timeout ${timeoutMs} ms)`;
    await processor.statements.park(tx, {
      entity: { tenant: row.tenant_id, scope: entity.scope, key: entity.key },
      now: new Date(now),
      reason,
      missing: current.expected,
    });
    parked = { expected: current.expected!, reason };
  }
  await wait(processor, tx, row, entity, 'infinity', new Date(waitingSince));
  return parked ? { outcome: 'parked', parked } : { outcome: 'parked' };
}

/** Puts the claimed receipt back to wait for its entity, until `until`. */
async function wait<Client>(
  processor: ProcessorContext<Client>,
  tx: Transaction<Client>,
  row: ClaimedRow,
  entity: DeclaredEntity,
  until: Date | 'infinity',
  waitingSince: unknown,
): Promise<void> {
  await processor.statements.wait(tx, { receipt: row, until, entity, waitingSince });
}

/** Records a handled receipt's outcome, with the entity it named, in its transaction. */
export async function finishReceipt<Client>(
  processor: ProcessorContext<Client>,
  tx: Transaction<Client>,
  row: ClaimedRow,
  state: 'applied' | 'superseded' | 'duplicate' | 'unhandled',
  entity: ReceiptEntity,
): Promise<void> {
  await processor.statements.finish(tx, {
    receipt: row,
    state,
    now: new Date(processor.clock.now()),
    entity,
    actedFor: actedForNow(),
  });
}
