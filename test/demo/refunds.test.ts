/**
 * The demo's refunds, tried as a user would: real HTTP to the demo and its fake provider, real
 * PostgreSQL, the provider's signed webhooks racing each other into the receiver and four workers.
 * - 20 payments × 3 simultaneous partial refunds at the provider, 10 rounds: every payment's
 *   `refunded`, its refund rows and its ledger reversals equal what the provider refunded, every
 *   round;
 * - the same refund delivered again, under its own or a new delivery id, is recorded once;
 * - validly signed events with absurd amounts or sequences are dead letters with the reason and
 *   change nothing; the genuine refunds after them still apply.
 */
import { randomUUID } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demoWebhookSecret } from '../../demo/config.js';
import type { ChargeRefundedEvent } from '../../demo/provider.js';
import { randomSchema, type DemoHandle } from '../../demo/server.js';
import { dropDemoSchemas, startTestDemo } from '../support/demo.js';
import { until } from '../support/poll.js';

let demo: DemoHandle;
const schema = randomSchema();
const auth = { authorization: 'Bearer sk_test_acme' };

async function pay(customer: string, amount: number): Promise<{ id: string; charge_id: string }> {
  const response = await fetch(`${demo.url}/v1/payments`, {
    method: 'POST',
    headers: {
      ...auth,
      'content-type': 'application/json',
      'idempotency-key': `refund-test-${randomUUID()}`,
    },
    body: JSON.stringify({ amount, currency: 'eur', customer }),
  });
  expect(response.status).toBe(201);
  return (await response.json()) as { id: string; charge_id: string };
}

async function refundAtProvider(chargeId: string, amount: number): Promise<number> {
  const response = await fetch(`${demo.providerUrl}/charges/${chargeId}/refunds`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ amount }),
  });
  await response.text();
  return response.status;
}

/** What the demo's books say about one payment. */
async function books(paymentId: string) {
  const d = `"${schema}_demo"`;
  const { rows } = await demo.pool.query<{
    refunded: number;
    refunds: number;
    refunds_total: number;
    reversals: number;
    reversed: number;
  }>(
    `SELECT p.refunded::int AS refunded,
        (SELECT count(*)::int FROM ${d}.refunds r WHERE r.payment_id = p.id) AS refunds,
        (SELECT coalesce(sum(amount), 0)::int FROM ${d}.refunds r WHERE r.payment_id = p.id) AS refunds_total,
        (SELECT count(*)::int FROM ${d}.ledger l WHERE l.payment_id = p.id AND l.kind = 'reversal') AS reversals,
        (SELECT coalesce(-sum(amount), 0)::int FROM ${d}.ledger l WHERE l.payment_id = p.id AND l.kind = 'reversal') AS reversed
      FROM ${d}.payments p WHERE p.id = $1`,
    [paymentId],
  );
  return rows[0]!;
}

async function providerCharges(): Promise<Map<string, { refunded: number }>> {
  const { data } = (await (await fetch(`${demo.providerUrl}/charges`)).json()) as {
    data: { id: string; refunded: number }[];
  };
  return new Map(data.map((c) => [c.id, c]));
}

const receiptStates = async () =>
  Object.fromEntries(
    (
      await demo.pool.query<{ state: string; n: number }>(
        `SELECT state, count(*)::int AS n FROM "${schema}".webhook_receipts GROUP BY state`,
      )
    ).rows.map((r) => [r.state, r.n]),
  );

/** Posts a validly signed `charge.refunded` to the demo, as the provider would. */
async function sendRefundEvent(
  data: ChargeRefundedEvent['data'],
  id = `msg_${randomUUID()}`,
): Promise<string> {
  const body = JSON.stringify({ type: 'charge.refunded', data });
  const now = new Date();
  const response = await fetch(`${demo.url}/webhooks/provider`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': new Webhook(demoWebhookSecret).sign(id, now, body),
    },
    body,
  });
  expect(response.status).toBeLessThan(300);
  return id;
}

beforeAll(async () => {
  demo = await startTestDemo(schema);
});
afterAll(async () => {
  await demo?.close();
  await dropDemoSchemas(schema);
});

describe('demo refunds', () => {
  it('20 payments × 3 simultaneous partial refunds, 10 rounds: the books equal the provider’s every round', async () => {
    for (let round = 1; round <= 10; round++) {
      const payments = await Promise.all(
        Array.from({ length: 20 }, (_, i) => pay(`refund_r${round}_${i}`, 1000)),
      );
      const statuses = await Promise.all(
        payments.flatMap((p) => [100, 200, 300].map((amount) => refundAtProvider(p.charge_id, amount))),
      );
      expect(statuses.every((s) => s === 200)).toBe(true);
      const charges = await providerCharges();
      // Wait until every refund's reversal reached the ledger (webhook → handler → outbox → inbox).
      await until(
        () => Promise.all(payments.map((p) => books(p.id))),
        (all) => all.every((b) => b.reversals >= 3),
        60_000,
      );
      const mismatched: string[] = [];
      for (const p of payments) {
        const provider = charges.get(p.charge_id)!.refunded;
        expect(provider).toBe(600);
        const b = await books(p.id);
        if (
          b.refunded !== provider ||
          b.refunds !== 3 ||
          b.refunds_total !== provider ||
          b.reversals !== 3 ||
          b.reversed !== provider
        ) {
          mismatched.push(`${p.id}: ${JSON.stringify(b)} vs provider ${provider}`);
        }
      }
      expect(mismatched, `round ${round}`).toEqual([]);
    }
    const states = await receiptStates();
    expect(states).toEqual({ applied: 600 });
  }, 300_000);

  it('the same refund delivered again, under its id or a new one, is recorded once', async () => {
    const payment = await pay(`refund_dup_${randomUUID().slice(0, 8)}`, 700);
    expect(await refundAtProvider(payment.charge_id, 700)).toBe(200);
    await until(
      () => books(payment.id),
      (b) => b.reversals >= 1,
    );
    const { rows } = await demo.pool.query<{ delivery_id: string; body: string }>(
      `SELECT delivery_id, convert_from(body, 'UTF8') AS body FROM "${schema}".webhook_receipts
        WHERE convert_from(body, 'UTF8') LIKE $1`,
      [`%${payment.charge_id}%`],
    );
    expect(rows).toHaveLength(1);
    const event = JSON.parse(rows[0]!.body) as ChargeRefundedEvent;
    expect(event.data).toMatchObject({ amount: 700, amount_refunded: 700, sequence: 1, charge_amount: 700 });
    await sendRefundEvent(event.data, rows[0]!.delivery_id); // the provider's delivery again: 200 duplicate
    const copy = await sendRefundEvent(event.data); // the same refund under a new delivery id
    await until(
      () =>
        demo.pool.query<{ state: string }>(
          `SELECT state FROM "${schema}".webhook_receipts WHERE delivery_id = $1`,
          [copy],
        ),
      (r) => r.rows[0]?.state === 'duplicate',
    );
    expect(await books(payment.id)).toEqual({
      refunded: 700,
      refunds: 1,
      refunds_total: 700,
      reversals: 1,
      reversed: 700,
    });
  });

  it('absurd amounts and sequences are dead letters with the reason; they change nothing, and genuine refunds still apply', async () => {
    const payment = await pay(`refund_bad_${randomUUID().slice(0, 8)}`, 1000);
    const base = { charge_id: payment.charge_id, charge_amount: 1000, currency: 'eur' };
    const negative = await sendRefundEvent({
      ...base,
      refund_id: 're_neg',
      amount: -5000,
      amount_refunded: 0,
      sequence: 1,
    });
    const huge = await sendRefundEvent({
      ...base,
      refund_id: 're_huge',
      amount: 99_999_999,
      amount_refunded: 99_999_999,
      sequence: 1,
    });
    const ahead = await sendRefundEvent({
      ...base,
      refund_id: 're_ahead',
      amount: 1,
      amount_refunded: 1,
      sequence: 1e15,
    });
    const deadReasons = await until(
      async () =>
        (
          await demo.pool.query<{ delivery_id: string; last_error: string }>(
            `SELECT delivery_id, last_error FROM "${schema}".webhook_receipts WHERE state = 'dead' AND delivery_id = ANY($1)`,
            [[negative, huge, ahead]],
          )
        ).rows,
      (rows) => rows.length === 3,
    );
    const reason = (id: string) => deadReasons.find((r) => r.delivery_id === id)?.last_error;
    expect(reason(negative)).toMatch(/^invalid event: the amount must be a positive integer \(got -5000\)/);
    expect(reason(huge)).toMatch(
      /^invalid event: refund re_huge of 99999999 is more than is left to refund on pay_[\w-]+ \(1000\)/,
    );
    expect(reason(ahead)).toMatch(
      /^invalid event: the sequence must be a positive integer no larger than amount_refunded/,
    );
    expect(await books(payment.id)).toEqual({
      refunded: 0,
      refunds: 0,
      refunds_total: 0,
      reversals: 0,
      reversed: 0,
    });

    // Sequence 1 is still the next one expected: the provider's genuine refunds apply.
    expect(await refundAtProvider(payment.charge_id, 250)).toBe(200);
    expect(await refundAtProvider(payment.charge_id, 750)).toBe(200);
    const after = await until(
      () => books(payment.id),
      (b) => b.reversals >= 2,
    );
    expect(after).toEqual({ refunded: 1000, refunds: 2, refunds_total: 1000, reversals: 2, reversed: 1000 });
  });
});
