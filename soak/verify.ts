/**
 * The verdict, per intent: exactly one payment, one provider charge, one ledger credit per
 * succeeded payment, one reversal per accepted refund, one receipt notification; every outbox
 * event published (none pending, none dead) and consumed by the ledger's inbox; no operation
 * pending past its lease. A finding is a duplicate (an effect happened more than once) or a loss
 * (an effect the client was promised is missing, or the client never got an answer).
 */
import type { Intent } from './clients.js';
import type { SoakState } from './state.js';

export interface Finding {
  kind: 'duplicate' | 'loss';
  what: string;
  intent?: string;
}

function groupBy<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const map = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const list = map.get(k);
    if (list) list.push(item);
    else map.set(k, [item]);
  }
  return map;
}

export function verify(intents: readonly Intent[], state: SoakState): Finding[] {
  const findings: Finding[] = [];
  const dup = (what: string, intent?: Intent) =>
    findings.push({ kind: 'duplicate', what, intent: intent?.key });
  const loss = (what: string, intent?: Intent) => findings.push({ kind: 'loss', what, intent: intent?.key });

  const paymentsByCustomer = groupBy(state.payments, (p) => p.customer);
  const chargesByCustomer = groupBy(state.charges, (c) => c.customer);
  const ledgerByPayment = groupBy(state.ledger, (e) => e.payment_id);
  const notificationsByPayment = groupBy(state.notifications, (n) => n.payment_id);
  const outboxByPayment = groupBy(state.outbox, (e) => e.key);
  const requestsByKey = groupBy(state.requests, (r) => `${r.tenant}\u0000${r.key}`);
  const known = new Set(intents.map((i) => i.customer));

  for (const intent of intents) {
    const who = `${intent.customer} (key ${intent.key})`;
    if (intent.unresolved) {
      loss(`${who}: no final answer after ${intent.attempts} attempts`, intent);
      continue;
    }
    if (intent.finalStatus !== 201 && intent.finalStatus !== 402) {
      loss(`${who}: final answer ${intent.finalStatus}: ${intent.finalBody?.slice(0, 300)}`, intent);
      continue;
    }
    const expectDeclined = intent.declined;
    if ((intent.finalStatus === 402) !== expectDeclined) {
      loss(
        `${who}: answered ${intent.finalStatus} for a ${expectDeclined ? 'declined' : 'good'} card`,
        intent,
      );
    }
    const payments = paymentsByCustomer.get(intent.customer) ?? [];
    if (payments.length > 1)
      dup(`${who}: ${payments.length} payments (${payments.map((p) => p.id).join(', ')})`, intent);
    if (payments.length === 0) {
      loss(`${who}: answered ${intent.finalStatus} but no payment row`, intent);
      continue;
    }
    const payment = payments[0]!;
    if (payment.id !== intent.paymentId) {
      loss(`${who}: the client was told ${intent.paymentId}, the database has ${payment.id}`, intent);
    }
    const charges = chargesByCustomer.get(intent.customer) ?? [];
    if (charges.length > 1) dup(`${who}: ${charges.length} provider charges`, intent);
    if (charges.length === 0) loss(`${who}: no provider charge`, intent);
    const requests = requestsByKey.get(`${intent.tenant}\u0000${intent.key}`) ?? [];
    // A stored refusal (the 402) is kept in state `failed`; a success in `completed`.
    const recorded = intent.finalStatus === 201 ? 'completed' : 'failed';
    if (requests.length !== 1 || requests[0]!.state !== recorded) {
      loss(`${who}: idempotency record ${requests.map((r) => r.state).join(',') || 'missing'}`, intent);
    }

    const entries = ledgerByPayment.get(payment.id) ?? [];
    const credits = entries.filter((e) => e.kind === 'credit');
    const reversals = entries.filter((e) => e.kind === 'reversal');
    const notifications = notificationsByPayment.get(payment.id) ?? [];
    const events = outboxByPayment.get(payment.id) ?? [];
    const created = events.filter((e) => e.type === 'payment.created');
    const refunded = events.filter((e) => e.type === 'payment.refunded');

    if (intent.finalStatus === 402) {
      if (payment.status !== 'declined')
        loss(`${who}: declined card, payment status ${payment.status}`, intent);
      if (entries.length > 0) dup(`${who}: declined card has ${entries.length} ledger entries`, intent);
      if (events.length > 0) dup(`${who}: declined card has ${events.length} events`, intent);
      if (notifications.length > 0)
        dup(`${who}: declined card has ${notifications.length} notifications`, intent);
      continue;
    }

    if (credits.length > 1) dup(`${who}: ${credits.length} ledger credits`, intent);
    if (credits.length === 0) loss(`${who}: no ledger credit`, intent);
    if (credits[0] && credits[0].amount !== intent.amount)
      loss(`${who}: credit ${credits[0].amount} ≠ ${intent.amount}`, intent);
    if (created.length > 1) dup(`${who}: ${created.length} payment.created events`, intent);
    if (created.length === 0) loss(`${who}: no payment.created event`, intent);
    if (notifications.length > 1) dup(`${who}: ${notifications.length} receipt notifications`, intent);
    if (notifications.length === 0) loss(`${who}: no receipt notification`, intent);

    const refundedTotal = intent.refunds.reduce((a, b) => a + b, 0);
    if (reversals.length > intent.refunds.length)
      dup(`${who}: ${reversals.length} reversals for ${intent.refunds.length} refunds`, intent);
    if (reversals.length < intent.refunds.length)
      loss(`${who}: ${reversals.length} reversals for ${intent.refunds.length} refunds`, intent);
    if (refunded.length > intent.refunds.length)
      dup(`${who}: ${refunded.length} payment.refunded events for ${intent.refunds.length} refunds`, intent);
    const reversed = -reversals.reduce((a, e) => a + e.amount, 0);
    if (reversals.length === intent.refunds.length && reversed !== refundedTotal) {
      loss(`${who}: reversed ${reversed}, refunded ${refundedTotal}`, intent);
    }
    if (payment.refunded !== refundedTotal && intent.refundErrors === 0) {
      (payment.refunded > refundedTotal ? dup : loss)(
        `${who}: payment.refunded ${payment.refunded}, refunds ${refundedTotal}`,
        intent,
      );
    }
    const charge = charges[0];
    if (charge && charge.refunded !== refundedTotal && intent.refundErrors === 0) {
      loss(`${who}: provider refunded ${charge.refunded}, the client saw ${refundedTotal} accepted`, intent);
    }
  }

  // Events: every one published, none dead, every one processed by the ledger's inbox once.
  const consumed = groupBy(state.ledger, (e) => e.event_id);
  for (const event of state.outbox) {
    if (event.dead) loss(`event ${event.id} (${event.type} ${event.key}) is dead: ${event.last_error}`);
    else if (!event.published)
      loss(`event ${event.id} (${event.type} ${event.key}) never published (${event.attempts} attempts)`);
    else if (state.inbox.get(event.id) !== 'processed')
      loss(
        `event ${event.id} (${event.type} ${event.key}) published, inbox ${state.inbox.get(event.id) ?? 'missing'}`,
      );
    if ((consumed.get(event.id)?.length ?? 0) > 1)
      dup(`event ${event.id} applied ${consumed.get(event.id)!.length} times`);
  }
  for (const [eventId, entries] of consumed) {
    if (!state.outbox.some((e) => e.id === eventId))
      dup(`ledger entries for unknown event ${eventId} (${entries.length})`);
  }

  // Nothing the clients did not ask for.
  for (const [customer, payments] of paymentsByCustomer) {
    if (!known.has(customer)) dup(`payments for an unknown customer ${customer}: ${payments.length}`);
  }
  for (const [customer, charges] of chargesByCustomer) {
    if (!known.has(customer)) dup(`provider charges for an unknown customer ${customer}: ${charges.length}`);
  }

  // Nothing stuck.
  const lapsed = state.requests.filter((r) => r.lapsed);
  if (lapsed.length > 0) loss(`${lapsed.length} operations pending past their lease`);
  const pending = state.requests.filter((r) => r.state === 'pending');
  if (pending.length > lapsed.length)
    loss(`${pending.length - lapsed.length} operations still pending (lease held) after settling`);
  // A refund webhook waiting for an earlier refund of its charge that never came (the demo applies
  // them in sequence) is a loss too; the per-intent reversal check above names the payment.
  for (const state_ of ['pending', 'processing', 'waiting', 'dead', 'unhandled']) {
    const n = state.receipts.get(state_) ?? 0;
    if (n > 0) loss(`${n} webhook receipts ${state_}`);
  }
  for (const state_ of ['ready', 'claimed', 'dead']) {
    const n = state.tasks.get(state_) ?? 0;
    if (n > 0) loss(`${n} receipt tasks ${state_}`);
  }
  return findings;
}
