/**
 * `POST /v1/payments` and the reads. A payment is a defined multi-step operation (`idem.define`)
 * under the client's Idempotency-Key: record the payment (a local step); charge the provider with
 * a derived key (a call: no transaction open while it runs); record the charge, the
 * `payment.created` event (outbox) and a receipt task (claims) in one transaction. Defined, so
 * that the demo's completer finishes a payment whose process died or whose client gave up.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Claims } from '../src/claims/claims.js';
import type { ResilientClient } from '../src/client/client.js';
import { httpAnswer } from '../src/http/answer.js';
import { headerMap } from '../src/http/response-headers.js';
import type { StoredResponseMeta } from '../src/http/stored-response.js';
import type { OperationDefinition } from '../src/operations/definitions.js';
import type { Idem } from '../src/operations/idem.js';
import type { Outbox } from '../src/outbox/outbox.js';
import { text } from './validation.js';

export type PaymentRow = {
  id: string;
  tenant: string;
  customer: string;
  amount: string | number;
  currency: string;
  status: string;
  charge_id: string | null;
  refunded: string | number;
  created_at: Date;
  /** The Idempotency-Key the payment was made under (null on rows of an older demo database). */
  idempotency_key: string | null;
};

export interface PaymentsDeps {
  demoSchema: string;
  outbox: Outbox;
  claims: Claims;
  provider: ResilientClient;
  providerUrl: string;
  /** The payment operation (`definePayments`). */
  createPayment: OperationDefinition<PaymentInput, StoredResponseMeta>;
}

interface NewPayment {
  amount: number;
  currency: string;
  customer: string;
}

/** What the payment operation runs on: the validated body and the authenticated tenant. */
export interface PaymentInput extends NewPayment {
  tenant: string;
}

/** The route's operation name, which is also the definition's: a completer finds its code by it. */
export const createPaymentOperation = 'POST /v1/payments';

/**
 * The payment, defined by name on `idem`. Its answer is the HTTP response (`httpAnswer`), so a
 * payment the completer finishes is replayed to the client byte for byte, like one that finished
 * in the request.
 */
export function definePayments(
  idem: Idem,
  deps: Omit<PaymentsDeps, 'createPayment'>,
): OperationDefinition<PaymentInput, StoredResponseMeta> {
  const { demoSchema, outbox, claims, provider, providerUrl } = deps;
  return idem.define<PaymentInput, StoredResponseMeta>(createPaymentOperation, async (op, input) => {
    const { tenant, ...body } = input;
    const payment = await op.step('record-payment', async (tx, { key }) => {
      const id = `pay_${key.slice(5, 29)}`;
      await tx.query(
        `INSERT INTO ${demoSchema}.payments (id, tenant, customer, amount, currency, status, idempotency_key)
          VALUES ($1, $2, $3, $4, $5, 'pending', $6)`,
        [id, tenant, body.customer, body.amount, body.currency, op.scope.key],
      );
      return { id };
    });

    // A call, not a step: no transaction or pooled connection is held while the provider answers.
    const charge = await op.call('charge', async ({ key, signal }) => {
      const response = await provider.fetch(`${providerUrl}/charges`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ amount: body.amount, currency: body.currency, customer: body.customer }),
        idempotencyKey: key,
        signal,
      });
      if (response.status !== 201 && response.status !== 402) {
        throw Object.assign(new Error(`provider answered ${response.status}`), { retryable: true });
      }
      const answer = (await response.json()) as { id?: string; charge?: { id: string } };
      return { declined: response.status === 402, chargeId: answer.id ?? answer.charge?.id ?? null };
    });

    const row = await op.step('record-charge', async (tx) => {
      const status = charge.declined ? 'declined' : 'succeeded';
      const { rows } = await tx.query<PaymentRow>(
        `UPDATE ${demoSchema}.payments SET status = $2, charge_id = $3 WHERE id = $1 RETURNING *`,
        [payment.id, status, charge.chargeId],
      );
      const updated = rows[0]!;
      if (!charge.declined) {
        await outbox.add(tx, {
          // The payment's tenant: the event's row, the ledger's inbox record and a trace's
          // `--message <id> --tenant <tenant>` lookup all name it.
          tenant,
          topic: 'payments',
          key: payment.id,
          type: 'payment.created',
          payload: { tenant, ...publicPayment(updated) },
        });
        await claims.enqueueIn(tx, {
          tenant,
          queue: 'receipts',
          key: `receipt:${payment.id}`,
          payload: { paymentId: payment.id },
        });
      }
      return publicPayment(updated);
    });

    const resource = { type: 'payment', id: row.id };
    if (charge.declined) {
      return httpAnswer(
        402,
        { type: 'urn:idem-demo:card-declined', title: 'Card declined', status: 402, payment: row },
        { headers: { 'content-type': 'application/problem+json' }, resource },
      );
    }
    return httpAnswer(201, row, { headers: { location: `/v1/payments/${row.id}` }, resource });
  });
}

/**
 * Validation happens in Fastify's schema step, before any key is claimed: a 400 is never stored.
 * The demo's validator is strict (see validation.ts): exact JSON types, unknown fields refused,
 * no control characters in strings.
 */
const paymentBody = {
  type: 'object',
  required: ['amount', 'currency', 'customer'],
  additionalProperties: false,
  properties: {
    amount: { type: 'integer', minimum: 1, maximum: 100_000_000_00 },
    currency: { type: 'string', pattern: '^[a-z]{3}$' },
    customer: text(64),
  },
} as const;

/** `?customer=` on the lists: one exact customer, as a payment names it; nothing else. */
const customerQuery = {
  type: 'object',
  additionalProperties: false,
  properties: { customer: text(64) },
} as const;

/** A payment id as the demo makes them (`pay_` and the derived key's hex); anything else is a 400. */
const paymentParams = {
  type: 'object',
  required: ['id'],
  additionalProperties: false,
  properties: { id: { type: 'string', pattern: '^pay_[A-Za-z0-9_-]{1,64}$' } },
} as const;

export function publicPayment(row: PaymentRow) {
  return {
    id: row.id,
    amount: Number(row.amount),
    currency: row.currency,
    customer: row.customer,
    status: row.status,
    charge_id: row.charge_id,
    refunded: Number(row.refunded),
    created: row.created_at instanceof Date ? row.created_at.toISOString() : row.created_at,
  };
}

export function registerPayments(app: FastifyInstance, deps: PaymentsDeps): void {
  const { demoSchema, createPayment } = deps;

  app.post<{ Body: NewPayment }>(
    '/v1/payments',
    { schema: { body: paymentBody }, config: { idempotency: { mode: 'steps' } } },
    async (request, reply) => {
      const answer = await request.idem!.run(createPayment, { tenant: request.tenant!, ...request.body });
      return reply
        .code(answer.status)
        .headers(headerMap(answer.headers))
        .send(Buffer.from(answer.body.buffer, answer.body.byteOffset, answer.body.byteLength));
    },
  );

  app.get<{ Querystring: { customer?: string } }>(
    '/v1/payments',
    { schema: { querystring: customerQuery } },
    async (request) => {
      const { rows } = await app.pg.query<PaymentRow>(
        `SELECT * FROM ${demoSchema}.payments WHERE tenant = $1 AND ($2::text IS NULL OR customer = $2) ORDER BY created_at, id LIMIT 1000`,
        [request.tenant, request.query.customer ?? null],
      );
      return { data: rows.map(publicPayment) };
    },
  );

  app.get<{ Params: { id: string } }>(
    '/v1/payments/:id',
    { schema: { params: paymentParams } },
    async (request, reply) => {
      const { rows } = await app.pg.query<PaymentRow>(
        `SELECT * FROM ${demoSchema}.payments WHERE tenant = $1 AND id = $2`,
        [request.tenant, request.params.id],
      );
      if (!rows[0]) return notFound(reply);
      return publicPayment(rows[0]);
    },
  );

  app.get<{ Querystring: { customer?: string } }>(
    '/v1/ledger',
    { schema: { querystring: customerQuery } },
    async (request) => {
      const { rows } = await app.pg.query(
        `SELECT id, payment_id, charge_id, kind, amount, customer, event_id, created_at FROM ${demoSchema}.ledger
       WHERE tenant = $1 AND ($2::text IS NULL OR customer = $2) ORDER BY id LIMIT 5000`,
        [request.tenant, request.query.customer ?? null],
      );
      return {
        data: rows.map((r: Record<string, unknown>) => ({
          ...r,
          id: Number(r.id),
          amount: Number(r.amount),
        })),
      };
    },
  );
}

function notFound(reply: FastifyReply) {
  return reply
    .code(404)
    .type('application/problem+json')
    .send({ type: 'urn:idem-demo:not-found', title: 'No such payment', status: 404 });
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated tenant, set by the auth hook. */
    tenant?: string;
  }
  interface FastifyInstance {
    pg: import('pg').Pool;
  }
}

export type { FastifyRequest };
