/**
 * Payments endpoints for the drill tests, on real HTTP and real PostgreSQL, speaking the demo's
 * contract: `POST /v1/payments` with `Authorization: Bearer sk_test_<tenant>` and JSON
 * `{ amount, currency, customer }`, and `GET /v1/payments?customer=…` → `{ data: [...] }`.
 *
 * `correct` is built on idem's keyed operations. The others each carry one bug that real services
 * have shipped, so each drill is seen to fail for the reason it exists.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fromPg } from 'idem/pg';
import { completed, createIdem, fingerprint, type Idem, isInProgress, isInvalidKey, isKeyReused } from 'idem';
import type { TestSchema } from '../database.js';

export type ServerKind =
  /** idem's keyed operation: claim, handler and stored body in one transaction. */
  | 'correct'
  /** Ignores the key: every request runs. */
  | 'no-dedupe'
  /** Reads the key table, and if nothing is there runs and then inserts: no transaction, no constraint. */
  | 'check-then-act'
  /** idem, but every tenant's keys share one scope (tenant fixed to 'default'). */
  | 'ignores-tenant'
  /** idem, but the fingerprint is a constant: another payload under the same key gets the first answer. */
  | 'ignores-payload';

export interface PaymentsServer {
  url: string;
  paymentsUrl: string;
  close(): Promise<void>;
}

interface Payment {
  amount: number;
  currency: string;
  customer: string;
}

/**
 * Business latency inside the handler, as a card provider call would add. It makes concurrent
 * duplicates overlap the first execution, which is the situation the concurrency drill is about.
 */
const workMs = 20;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface PaymentsServerOptions {
  /** idem's wait for a concurrent duplicate before 409 in-progress. Default 5000 ms (idem's). */
  waitMs?: number;
  /** Table name suffix, for a second server of the same kind. Default none. */
  suffix?: string;
  /** idem's recording. Default idem's ('commit'). 'claim' makes a duplicate meet the running first execution and wait, then 409. */
  recording?: 'commit' | 'claim';
}

export async function startPaymentsServer(
  db: TestSchema,
  kind: ServerKind,
  options: PaymentsServerOptions = {},
): Promise<PaymentsServer> {
  const table = `"${db.schema}"."payments_${kind.replace(/-/g, '_')}${options.suffix ?? ''}"`;
  const keys = `"${db.schema}"."naive_keys"`;
  await db.pool.query(
    `CREATE TABLE ${table} (id bigserial PRIMARY KEY, tenant text NOT NULL, customer text NOT NULL,
       amount int NOT NULL, currency text NOT NULL)`,
  );
  if (kind === 'check-then-act') {
    // No unique constraint: the bug is in the code, and the schema does not catch it either.
    await db.pool.query(
      `CREATE TABLE ${keys} (tenant text NOT NULL, key text NOT NULL, fingerprint text NOT NULL, body text NOT NULL)`,
    );
  }
  const idem = createIdem({
    sql: fromPg(db.pool),
    schema: db.schema,
    waitMs: options.waitMs ?? 5000,
    ...(options.recording ? { recording: options.recording } : {}),
  });

  const insertPayment = async (
    query: (text: string, params: unknown[]) => Promise<{ rows: unknown[] }>,
    tenant: string,
    p: Payment,
  ): Promise<Buffer> => {
    const { rows } = await query(
      `INSERT INTO ${table} (tenant, customer, amount, currency) VALUES ($1, $2, $3, $4) RETURNING id`,
      [tenant, p.customer, p.amount, p.currency],
    );
    await sleep(workMs);
    const id = (rows[0] as { id: string }).id;
    return Buffer.from(
      JSON.stringify({
        id: `pay_${id}`,
        amount: p.amount,
        currency: p.currency,
        customer: p.customer,
        status: 'succeeded',
      }),
    );
  };

  const create = async (req: IncomingMessage, res: ServerResponse, tenant: string, raw: Buffer) => {
    const payment = parsePayment(raw);
    if (!payment) return problem(res, 400, 'invalid-payment');
    const keyHeader = req.headers['idempotency-key'];
    const key = typeof keyHeader === 'string' ? keyHeader : undefined;
    switch (kind) {
      case 'no-dedupe': {
        const body = await insertPayment((t, p) => db.pool.query(t, p), tenant, payment);
        return send(res, 201, body, false);
      }
      case 'check-then-act': {
        if (!key || key.length > 255) return problem(res, 400, 'key-missing');
        const print = fingerprint(payment);
        const { rows } = await db.pool.query<{ fingerprint: string; body: string }>(
          `SELECT fingerprint, body FROM ${keys} WHERE tenant = $1 AND key = $2 LIMIT 1`,
          [tenant, key],
        );
        if (rows[0]) {
          if (rows[0].fingerprint !== print) return problem(res, 422, 'key-reused');
          return send(res, 201, Buffer.from(rows[0].body), true);
        }
        const body = await insertPayment((t, p) => db.pool.query(t, p), tenant, payment);
        await db.pool.query(`INSERT INTO ${keys} (tenant, key, fingerprint, body) VALUES ($1, $2, $3, $4)`, [
          tenant,
          key,
          print,
          body.toString(),
        ]);
        return send(res, 201, body, false);
      }
      default:
        return runKeyed(idem, res, kind, tenant, key, payment, (tx) =>
          insertPayment((t, p) => tx.query(t, p), tenant, payment),
        );
    }
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      handle(req, res, Buffer.concat(chunks)).catch((error: unknown) => {
        if (!res.headersSent) problem(res, 500, String(error));
      });
    });
  });

  const handle = async (req: IncomingMessage, res: ServerResponse, raw: Buffer) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname !== '/v1/payments') return problem(res, 404, 'not-found');
    const tenant = /^Bearer sk_test_([a-z0-9_]{1,32})$/.exec(req.headers.authorization ?? '')?.[1];
    if (!tenant) return problem(res, 401, 'unauthorized');
    if (req.method === 'GET') {
      const { rows } = await db.pool.query(
        `SELECT id, customer, amount, currency FROM ${table} WHERE tenant = $1 AND customer = $2 ORDER BY id`,
        [tenant, url.searchParams.get('customer') ?? ''],
      );
      return send(res, 200, Buffer.from(JSON.stringify({ data: rows })), undefined);
    }
    if (req.method === 'POST') return create(req, res, tenant, raw);
    return problem(res, 405, 'method-not-allowed');
  };

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    paymentsUrl: `${url}/v1/payments`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The keyed path: idem's claim, the business insert and the stored body commit together. */
async function runKeyed(
  idem: Idem,
  res: ServerResponse,
  kind: Exclude<ServerKind, 'no-dedupe' | 'check-then-act'>,
  tenant: string,
  key: string | undefined,
  payment: Payment,
  work: (tx: { query: (t: string, p: unknown[]) => Promise<{ rows: unknown[] }> }) => Promise<Buffer>,
): Promise<void> {
  try {
    const result = await idem.run(
      {
        tenant: kind === 'ignores-tenant' ? 'default' : tenant, // the bug: one key space for everyone
        operation: 'create-payment',
        key: key as string, // a missing key is refused by idem with InvalidKeyError
        request: payment,
        ...(kind === 'ignores-payload' ? { fingerprint: 'same-for-every-payload' } : {}), // the bug
      },
      async (tx) => {
        const body = await work(tx);
        return completed({ ok: true }, { body });
      },
    );
    send(res, 201, Buffer.from(result.body!), result.replayed);
  } catch (error) {
    if (isInvalidKey(error)) return problem(res, 400, 'key-invalid');
    if (isKeyReused(error)) return problem(res, 422, 'key-reused');
    if (isInProgress(error)) {
      res.setHeader('Retry-After', String(Math.ceil(error.retryAfterMs / 1000)));
      return problem(res, 409, 'in-progress');
    }
    throw error;
  }
}

function parsePayment(raw: Buffer): Payment | undefined {
  try {
    const p = JSON.parse(raw.toString()) as Partial<Payment>;
    const ok =
      Number.isInteger(p.amount) &&
      (p.amount as number) > 0 &&
      typeof p.currency === 'string' &&
      /^[a-z]{3}$/.test(p.currency) &&
      typeof p.customer === 'string' &&
      p.customer.length >= 1 &&
      p.customer.length <= 64;
    return ok ? { amount: p.amount!, currency: p.currency!, customer: p.customer! } : undefined;
  } catch {
    return undefined;
  }
}

function send(res: ServerResponse, status: number, body: Buffer, replayed: boolean | undefined): void {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (replayed) headers['idempotent-replayed'] = 'true';
  res.writeHead(status, headers).end(body);
}

function problem(res: ServerResponse, status: number, code: string): void {
  res
    .writeHead(status, { 'content-type': 'application/problem+json' })
    .end(JSON.stringify({ type: `urn:test:${code}`, status, code }));
}
