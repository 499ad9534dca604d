/**
 * Client loops: each sends payments, one new customer per intent, and retries with the SAME
 * Idempotency-Key on every network error, timeout (AbortSignal), 409 (after its Retry-After,
 * capped) and 5xx, each time against an instance picked at random, as a client behind a load
 * balancer would. A share of succeeded payments is then refunded at the provider, which sends the
 * demo a signed `charge.refunded` webhook per refund.
 */
import { randomUUID } from 'node:crypto';
import type { AppInstance } from './instances.js';
import { sleep, type Random } from './random.js';

export interface Intent {
  tenant: string;
  customer: string;
  key: string;
  amount: number;
  declined: boolean;
  attempts: number;
  /** 201 or 402 once the client has a final answer; another status ends the intent as a failure. */
  finalStatus: number | undefined;
  finalBody: string | undefined;
  paymentId: string | undefined;
  chargeId: string | undefined;
  /** Amounts of the refunds the provider accepted. */
  refunds: number[];
  /** Refund calls that failed at the provider (they may or may not have happened). */
  refundErrors: number;
  /** The client gave up: no final answer within the intent deadline. */
  unresolved: boolean;
}

export interface ClientStats {
  intents: number;
  requests: number;
  retries: number;
  byStatus: Map<string, number>;
  networkErrors: number;
  timeouts: number;
  refundCalls: number;
  /** Second partial refunds sent before the first showed in the ledger (the wait ran out). */
  refundWaitsTimedOut: number;
}

export function newClientStats(): ClientStats {
  return {
    intents: 0,
    requests: 0,
    retries: 0,
    byStatus: new Map(),
    networkErrors: 0,
    timeouts: 0,
    refundCalls: 0,
    refundWaitsTimedOut: 0,
  };
}

export interface ClientOptions {
  runId: string;
  instances: readonly AppInstance[];
  providerUrl: string;
  random: Random;
  stats: ClientStats;
  intents: Intent[];
  requestTimeoutMs: number;
  intentDeadlineMs: number;
  refundShare: number;
  /** Send two partial refunds back to back instead of waiting for the first to show. */
  refundRace: boolean;
  declinedShare: number;
  /** Returns false once no new intent may start. */
  running: () => boolean;
}

const tenants = ['soak_acme', 'soak_globex', 'soak_initech'];

/** One client loop; resolves when `running()` is false and its current intent is settled. */
export async function clientLoop(index: number, options: ClientOptions): Promise<void> {
  const { random } = options;
  let n = 0;
  while (options.running()) {
    const declined = random.chance(options.declinedShare);
    const intent: Intent = {
      tenant: tenants[index % tenants.length]!,
      customer: `${declined ? 'declined_' : ''}${options.runId}_${index}_${n++}`,
      key: `soak-${randomUUID()}`,
      amount: random.int(100, 100_000),
      declined,
      attempts: 0,
      finalStatus: undefined,
      finalBody: undefined,
      paymentId: undefined,
      chargeId: undefined,
      refunds: [],
      refundErrors: 0,
      unresolved: false,
    };
    options.intents.push(intent);
    options.stats.intents++;
    await pay(intent, options);
    if (intent.finalStatus === 201 && intent.chargeId && random.chance(options.refundShare)) {
      await refund(intent, options);
    }
  }
}

async function pay(intent: Intent, options: ClientOptions): Promise<void> {
  const { stats, random } = options;
  const body = JSON.stringify({ amount: intent.amount, currency: 'eur', customer: intent.customer });
  const deadline = Date.now() + options.intentDeadlineMs;
  for (;;) {
    if (Date.now() > deadline) {
      intent.unresolved = true;
      return;
    }
    const instance = random.pick(options.instances);
    intent.attempts++;
    stats.requests++;
    if (intent.attempts > 1) stats.retries++;
    instance.inflight++;
    let status: number;
    let text: string;
    let retryAfter: string | null;
    try {
      const response = await fetch(`${instance.url}/v1/payments`, {
        method: 'POST',
        headers: {
          authorization: `Bearer sk_test_${intent.tenant}`,
          'content-type': 'application/json',
          'idempotency-key': intent.key,
        },
        body,
        signal: AbortSignal.timeout(options.requestTimeoutMs),
      });
      status = response.status;
      retryAfter = response.headers.get('retry-after');
      text = await response.text();
    } catch (error) {
      const name = (error as Error).name;
      if (name === 'TimeoutError' || name === 'AbortError') stats.timeouts++;
      else stats.networkErrors++;
      count(stats, 'network');
      await sleep(random.between(50, 250));
      continue;
    } finally {
      instance.inflight--;
    }
    count(stats, String(status));
    if (status === 201 || status === 402) {
      intent.finalStatus = status;
      intent.finalBody = text;
      const parsed = JSON.parse(text) as {
        id?: string;
        charge_id?: string;
        payment?: { id: string; charge_id: string };
      };
      const payment = status === 201 ? parsed : parsed.payment;
      intent.paymentId = payment?.id;
      intent.chargeId = payment?.charge_id ?? undefined;
      return;
    }
    if (status === 409) {
      const seconds = Number(retryAfter ?? 1);
      // Honour Retry-After, briefly: a client that waits the full advice is slower, not safer.
      await sleep(Math.min(Number.isFinite(seconds) ? seconds * 1000 : 1000, 1000) * random.between(0.5, 1));
      continue;
    }
    if (status >= 500) {
      await sleep(random.between(100, 400));
      continue;
    }
    // 400, 401, 404, 413, 422: the request was always the same, so any of these is a defect.
    intent.finalStatus = status;
    intent.finalBody = text;
    return;
  }
}

/**
 * One full refund, one partial, or two partials. With `refundRace` the two partials go back to
 * back, so their two webhooks race (the demo applies them in the provider's per-charge sequence
 * whatever their arrival order); otherwise the second waits until the first shows in the ledger
 * (a merchant refunding twice, some time apart).
 */
async function refund(intent: Intent, options: ClientOptions): Promise<void> {
  const { random } = options;
  const roll = random.next();
  const third = Math.max(1, Math.floor(intent.amount / 3));
  const amounts = roll < 0.4 ? [intent.amount] : roll < 0.7 ? [third] : [third, third];
  for (const [index, amount] of amounts.entries()) {
    if (index > 0 && !options.refundRace) await reversalsSeen(intent, index, options);
    options.stats.refundCalls++;
    try {
      const response = await fetch(`${options.providerUrl}/charges/${intent.chargeId}/refunds`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ amount }),
        signal: AbortSignal.timeout(options.requestTimeoutMs),
      });
      await response.text();
      if (response.status === 200) intent.refunds.push(amount);
      else intent.refundErrors++;
    } catch {
      intent.refundErrors++;
    }
  }
}

/**
 * Waits until the ledger shows `count` reversals for the intent's customer, for as long as a
 * payment may take (the intent deadline): under kills a webhook can wait for a lapsed processing
 * lease and its backoff. A wait that runs out is counted; the refund is then sent anyway.
 */
async function reversalsSeen(intent: Intent, count: number, options: ClientOptions): Promise<void> {
  const deadline = Date.now() + options.intentDeadlineMs;
  while (Date.now() < deadline) {
    const instance = options.random.pick(options.instances);
    try {
      const response = await fetch(
        `${instance.url}/v1/ledger?customer=${encodeURIComponent(intent.customer)}`,
        {
          headers: { authorization: `Bearer sk_test_${intent.tenant}` },
          signal: AbortSignal.timeout(options.requestTimeoutMs),
        },
      );
      const ledger = (await response.json()) as { data?: { kind: string }[] };
      if ((ledger.data ?? []).filter((e) => e.kind === 'reversal').length >= count) return;
    } catch {
      // that instance is down: ask another
    }
    await sleep(250);
  }
  options.stats.refundWaitsTimedOut++;
}

function count(stats: ClientStats, key: string): void {
  stats.byStatus.set(key, (stats.byStatus.get(key) ?? 0) + 1);
}
