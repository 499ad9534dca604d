/**
 * Discarding one webhook receipt: an operator's tool for a delivery that must never be applied and
 * that nothing else will end, such as a `sequence` event whose version is far ahead of any real one
 * (it would wait, and keep its entity parked, for ever). The CLI (`idem webhooks discard`) uses it
 * on the pool alone; `WebhookProcessor.discard()` calls it too.
 */
import { systemClock, type Clock } from '../core/clock.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { IdemEvents } from '../core/event-channel.js';
import type { Sql } from '../core/sql.js';
import { defaultTenant, validateTenant } from '../core/tenant.js';
import { defaultSchema } from '../core/schema-name.js';
import { renderOperatorStatements } from './operator-statements.js';

/** Which receipt to discard, and why. */
export interface DiscardOptions {
  /** The receipt's source (the receiver's `source`). */
  source: string;
  /** The delivery id it was stored under. */
  deliveryId: string;
  /** Why: stored as the dead letter's error (`discarded by an operator: …`) and in `webhook:discarded`. */
  reason?: string;
  /** The receipt's tenant. Default `''`, the default tenant. */
  tenant?: string;
}

/** What a discard did. */
export interface DiscardResult {
  /** The state the receipt left: `pending` or `waiting`. It is `dead` now. */
  from: 'pending' | 'waiting';
  /** The entity it named, when it had been looked at as an entity event. */
  entity: { scope: string; key: string } | null;
  /** Whether its entity was parked with nothing else waiting, and is no longer parked. */
  unparked: boolean;
}

declare module '../core/event-channel.js' {
  interface IdemEventMap {
    /** An operator's `discard` made a pending or waiting receipt a dead letter. */
    'webhook:discarded': {
      tenant: string;
      source: string;
      deliveryId: string;
      from: 'pending' | 'waiting';
      unparked: boolean;
      reason?: string;
    };
  }
}

/**
 * Makes one pending or waiting receipt a dead letter (`discarded by an operator: <reason>`): it is
 * never handled, and `redrive` brings it back like any dead letter. When it waited behind a gap of
 * a parked entity and nothing else waits there, the entity is unparked. Refuses
 * (`InvalidArgumentError`) an unknown receipt and one in any other state: a processing one is a
 * worker's until its attempt ends, a handled one has had its effect. With `events`, reports
 * `webhook:discarded` there.
 */
export async function discardReceipt(
  sql: Sql,
  options: DiscardOptions & { schema?: string; clock?: Clock; events?: IdemEvents },
): Promise<DiscardResult> {
  const tenant = options.tenant ?? defaultTenant;
  validateTenant(tenant);
  for (const field of ['source', 'deliveryId'] as const) {
    if (typeof options[field] !== 'string' || options[field] === '') {
      throw new InvalidArgumentError(`${field} must be a non-empty string`);
    }
  }
  const statements = renderOperatorStatements(options.schema ?? defaultSchema);
  const now = new Date((options.clock ?? systemClock).now());
  const error = `discarded by an operator: ${options.reason ?? 'no reason given'}`;
  const receipt = { tenant, source: options.source, deliveryId: options.deliveryId };
  const result = await sql.transaction(async (tx): Promise<DiscardResult> => {
    const from = (await statements.receiptState(tx, receipt))?.state;
    if (from !== 'pending' && from !== 'waiting') {
      const which = `webhook receipt ${options.source}/${options.deliveryId}${tenant === defaultTenant ? '' : ` of tenant ${tenant}`}`;
      throw new InvalidArgumentError(
        from === undefined
          ? `no ${which}`
          : `${which} is ${from}: only a pending or waiting receipt can be discarded` +
              (from === 'processing' ? ' (a worker holds it; try again when its attempt ends)' : ''),
      );
    }
    const discarded = await statements.discard(tx, { receipt, now, error });
    const scope = discarded?.entity_scope;
    const key = discarded?.entity_key;
    if (!scope || key === null || key === undefined) return { from, entity: null, unparked: false };
    const unparked = await statements.unparkIdle(tx, { tenant, scope, key });
    return { from, entity: { scope, key }, unparked: unparked > 0 };
  });
  const { from, unparked } = result;
  const reason = options.reason !== undefined ? { reason: options.reason } : {};
  options.events?.emit('webhook:discarded', { ...receipt, from, unparked, ...reason });
  return result;
}
