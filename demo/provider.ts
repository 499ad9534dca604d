/**
 * The demo's fake card provider: a real HTTP service that behaves like a payment provider.
 * - `POST /charges` honours `Idempotency-Key`: one charge per key, whatever the number of calls;
 *   the same key with a different body is refused with 422, like Stripe.
 * - A customer whose name starts with `declined` is declined (402), and that answer is kept per key too.
 * - `GET /charges?customer=…` lists what it created, as `{ "data": [ … ] }`.
 * - `POST /charges/:id/refunds` refunds (partially or fully) and sends a signed Standard Webhook
 *   `charge.refunded` to the merchant, carrying what a real provider sends: the refund's id and
 *   amount, the charge's amount and cumulative refunded amount after this refund, and a per-charge
 *   sequence (1 for the first refund of the charge, then 2, …). Concurrent refunds of one charge
 *   are numbered in the order the provider accepted them; their webhooks race to the merchant.
 * State lives in memory: the provider is a stand-in for someone else's system.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface ProviderOptions {
  /** Port; default 3001 (`PROVIDER_PORT`). 0 picks a free one. */
  port?: number;
  /** Where refund webhooks go, e.g. `http://127.0.0.1:3000/webhooks/provider`; a function is read at send time. */
  webhookUrl?: string | (() => string);
  /** Standard Webhooks secret (`whsec_…`) shared with the merchant. */
  webhookSecret: string;
  /** Artificial latency per charge, to make crashes mid-call likely in drills. Default 0. */
  latencyMs?: number;
}

export interface Charge {
  id: string;
  amount: number;
  currency: string;
  customer: string;
  status: 'succeeded' | 'declined';
  refunded: number;
  created: number;
  idempotency_key: string;
}

/** The body of a `charge.refunded` webhook. */
export interface ChargeRefundedEvent {
  type: 'charge.refunded';
  data: {
    charge_id: string;
    /** The refund's own id (`re_…`): one per refund, the same on every redelivery. */
    refund_id: string;
    /** This refund's amount, in the charge's minor unit. */
    amount: number;
    /** The charge's amount. */
    charge_amount: number;
    /** What the charge has refunded in all, this refund included. */
    amount_refunded: number;
    /** 1 for the charge's first refund, then 2, 3, …: the order the provider accepted them in. */
    sequence: number;
    currency: string;
  };
}

export interface FakeCardProvider {
  url: string;
  server: Server;
  charges: Map<string, Charge>;
  /** Calls received, including retries that returned an existing charge. */
  callCount(): number;
  close(): Promise<void>;
}

export async function startProvider(options: ProviderOptions): Promise<FakeCardProvider> {
  const byKey = new Map<string, { fingerprint: string; status: number; body: string }>();
  const charges = new Map<string, Charge>();
  const sequences = new Map<string, number>();
  const webhook = new Webhook(options.webhookSecret);
  let calls = 0;

  const send = (res: ServerResponse, status: number, body: unknown) => {
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json' }).end(text);
  };

  const deliverRefundWebhook = async (event: ChargeRefundedEvent) => {
    const target = typeof options.webhookUrl === 'function' ? options.webhookUrl() : options.webhookUrl;
    if (!target) return;
    const id = `msg_${randomUUID()}`;
    const payload = JSON.stringify(event);
    // Redeliver with the same id until the merchant answers 2xx, as real providers do.
    for (let attempt = 0; attempt < 8; attempt++) {
      const timestamp = new Date();
      const signature = webhook.sign(id, timestamp, payload);
      try {
        const response = await fetch(target, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'webhook-id': id,
            'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
            'webhook-signature': signature,
          },
          body: payload,
        });
        if (response.ok) return;
      } catch {
        // merchant down: retry below
      }
      await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
    }
  };

  const handle = async (req: IncomingMessage, res: ServerResponse, body: string) => {
    const url = new URL(req.url ?? '/', 'http://provider');
    if (req.method === 'GET' && url.pathname === '/charges') {
      const customer = url.searchParams.get('customer');
      const data = [...charges.values()].filter((c) => !customer || c.customer === customer);
      return send(res, 200, { data });
    }
    if (req.method === 'POST' && url.pathname === '/charges') {
      calls++;
      const key = req.headers['idempotency-key'];
      if (typeof key !== 'string' || !key) return send(res, 400, { error: 'idempotency_key_required' });
      const existing = byKey.get(key);
      if (existing) {
        if (existing.fingerprint !== body) return send(res, 422, { error: 'idempotency_key_reused' });
        res.setHeader('idempotent-replayed', 'true');
        return send(res, existing.status, existing.body);
      }
      let input: { amount?: unknown; currency?: unknown; customer?: unknown };
      try {
        input = JSON.parse(body) as typeof input;
      } catch {
        return send(res, 400, { error: 'invalid_json' });
      }
      if (
        typeof input.amount !== 'number' ||
        typeof input.customer !== 'string' ||
        typeof input.currency !== 'string'
      ) {
        return send(res, 400, { error: 'invalid_request' });
      }
      if (options.latencyMs) await new Promise((r) => setTimeout(r, options.latencyMs));
      const again = byKey.get(key); // a concurrent call with the same key got there first
      if (again) return send(res, again.status, again.body);
      const declined = input.customer.startsWith('declined');
      const charge: Charge = {
        id: `ch_${randomUUID().replaceAll('-', '').slice(0, 20)}`,
        amount: input.amount,
        currency: input.currency,
        customer: input.customer,
        status: declined ? 'declined' : 'succeeded',
        refunded: 0,
        created: Date.now(),
        idempotency_key: key,
      };
      charges.set(charge.id, charge);
      const status = declined ? 402 : 201;
      const answer = JSON.stringify(declined ? { error: 'card_declined', charge } : charge);
      byKey.set(key, { fingerprint: body, status, body: answer });
      return send(res, status, answer);
    }
    const refund = /^\/charges\/([^/]+)\/refunds$/.exec(url.pathname);
    if (req.method === 'POST' && refund) {
      const charge = charges.get(refund[1]!);
      if (!charge || charge.status !== 'succeeded') return send(res, 404, { error: 'no_such_charge' });
      let input: { amount?: unknown };
      try {
        input = JSON.parse(body || '{}') as typeof input;
      } catch {
        return send(res, 400, { error: 'invalid_json' });
      }
      const amount = input.amount ?? charge.amount - charge.refunded;
      if (
        !Number.isSafeInteger(amount) ||
        (amount as number) <= 0 ||
        charge.refunded + (amount as number) > charge.amount
      )
        return send(res, 400, { error: 'invalid_amount' });
      // Numbered and totalled here, synchronously, in the order the refunds are accepted.
      charge.refunded += amount as number;
      const sequence = (sequences.get(charge.id) ?? 0) + 1;
      sequences.set(charge.id, sequence);
      const refundId = `re_${randomUUID().replaceAll('-', '').slice(0, 20)}`;
      void deliverRefundWebhook({
        type: 'charge.refunded',
        data: {
          charge_id: charge.id,
          refund_id: refundId,
          amount: amount as number,
          charge_amount: charge.amount,
          amount_refunded: charge.refunded,
          sequence,
          currency: charge.currency,
        },
      });
      return send(res, 200, { ...charge, refund: { id: refundId, amount, sequence } });
    }
    return send(res, 404, { error: 'not_found' });
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      handle(req, res, Buffer.concat(chunks).toString('utf8')).catch(() =>
        send(res, 500, { error: 'internal' }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 3001, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    charges,
    callCount: () => calls,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
